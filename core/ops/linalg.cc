// Matrix products. matmul follows torch.matmul's broadcasting rules and folds batch dims
// into rows when the right operand is a matrix (one GEMM instead of a batch of small ones).
#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "core/util/thread_pool.h"

namespace anvil {
namespace {

void CheckSameDtype(const Tensor& a, const Tensor& b, const char* op) {
  ANVIL_CHECK_TYPE(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, but got ", a.dtype(),
                   " and ", b.dtype());
}

}  // namespace

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  const std::vector<Tensor> in = autocast_inputs(OpId::Mm, {a_in, b_in});
  CheckSameDtype(in[0], in[1], "mm");
  return dispatch1(OpId::Mm, in, OpAttrs{});
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const std::vector<Tensor> in = autocast_inputs(OpId::Bmm, {a_in, b_in});
  CheckSameDtype(in[0], in[1], "bmm");
  return dispatch1(OpId::Bmm, in, OpAttrs{});
}

namespace {

// Multiply-adds of mm(a, b), or 0 when the operands are not two matrices (mm then reports it).
int64_t MmWork(const Tensor& a, const Tensor& b) {
  return a.dim() == 2 && b.dim() == 2 ? a.size(0) * a.size(1) * b.size(1) : 0;
}

// Whether mm_pair's products run side by side: while both are large (kPairWork multiply-adds
// each, ~20 µs of one core) and of a similar size (each runs whole on one thread). Smaller
// products are better split by rows one after the other (cpu::kGemmSplitWork): each half's
// rows then stay on the core that reads them next. Measured on the 64-128-128-10 MLP step:
// pairing its two 64x128x128 products (1M each) made it 9 % slower; at batch 256 pairing
// the two 256x128x128 products is ~3 % faster, and the head's 256x10x128 pair is even.
bool SideBySide(const Tensor& a0, const Tensor& b0, const Tensor& a1, const Tensor& b1) {
  constexpr int64_t kPairWork = int64_t{1} << 21;
  if (GradMode::is_enabled() || get_num_threads() < 2 || in_parallel_region()) return false;
  for (const Tensor* t : {&a0, &b0, &a1, &b1}) {
    if (!t->device().is_cpu()) return false;
  }
  const int64_t w0 = MmWork(a0, b0), w1 = MmWork(a1, b1);
  const int64_t lo = std::min(w0, w1), hi = std::max(w0, w1);
  return lo >= kPairWork && 2 * hi <= 3 * lo;
}

}  // namespace

std::array<Tensor, 2> mm_pair(const Tensor& a0, const Tensor& b0, const Tensor& a1, const Tensor& b1) {
  if (!SideBySide(a0, b0, a1, b1)) return {mm(a0, b0), mm(a1, b1)};
  std::array<Tensor, 2> r;
  parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
    NoGradGuard no_grad;  // grad mode is per thread, and a pool thread's is on
    for (int64_t i = begin; i < end; ++i) r[i] = i == 0 ? mm(a0, b0) : mm(a1, b1);
  });
  return r;
}

Tensor dot(const Tensor& a, const Tensor& b) {
  ANVIL_CHECK(a.dim() == 1 && b.dim() == 1, "dot: expected 1-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
  ANVIL_CHECK(a.size(0) == b.size(0), "dot: inconsistent tensor size, expected tensor [", a.size(0), "] and src [",
              b.size(0), "] to have the same number of elements");
  CheckSameDtype(a, b, "dot");
  return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
}

Tensor outer(const Tensor& a, const Tensor& b) { return a.unsqueeze(1) * b.unsqueeze(0); }

Tensor matmul(const Tensor& a, const Tensor& b) {
  const int64_t da = a.dim(), db = b.dim();
  ANVIL_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dimension, got ", da, "D and ", db, "D");
  if (da == 1 && db == 1) return dot(a, b);
  if (da == 2 && db == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
  if (da == 1 && db == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (da == 2 && db == 2) return mm(a, b);
  if (da >= 3 && db <= 2) {
    // Fold batch dims into rows: [..., n, k] @ [k, m] -> one [(...n), k] @ [k, m].
    Tensor bm = db == 1 ? b.unsqueeze(1) : b;
    IntArray out = a.sizes();
    Tensor r = mm(a.reshape({-1, a.size(-1)}), bm);
    out.back() = bm.size(1);
    Tensor res = r.view(out);
    return db == 1 ? res.squeeze(-1) : res;
  }
  // General case: broadcast the batch dims, then bmm.
  Tensor a2 = da == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
  IntArray ba(a2.sizes().begin(), a2.sizes().end() - 2), bb(b2.sizes().begin(), b2.sizes().end() - 2);
  IntArray batch = broadcast_shapes(ba, bb);
  const int64_t n = a2.size(-2), k = a2.size(-1), m = b2.size(-1);
  ANVIL_CHECK(b2.size(-2) == k, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
              " cannot be multiplied (", k, " != ", b2.size(-2), ")");
  IntArray ea = batch, eb = batch;
  ea.push_back(n);
  ea.push_back(k);
  eb.push_back(k);
  eb.push_back(m);
  const int64_t nb = numel_of(batch);
  Tensor r = bmm(a2.expand(ea).reshape({nb, n, k}), b2.expand(eb).reshape({nb, k, m}));
  IntArray out = batch;
  if (da > 1) out.push_back(n);
  if (db > 1) out.push_back(m);
  return r.reshape(out);
}

Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  Tensor p = mm(a, b);
  if (alpha.to_double() != 1) p = p * alpha;
  if (beta.to_double() == 0) return p;
  return beta.to_double() == 1 ? c + p : c * beta + p;
}

namespace {

void CheckLinearShapes(const Tensor& x, const Tensor& weight) {
  ANVIL_CHECK(weight.dim() == 2, "linear: expected a 2-D weight [out_features, in_features], got ",
              shape_str(weight.sizes()));
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input has ", x.dim() >= 1 ? x.size(-1) : 0,
              " features (shape ", shape_str(x.sizes()), ") but the weight expects ", weight.size(1), " (weight shape ",
              shape_str(weight.sizes()), ")");
}

// Whether a bias fits the linear rows: the [out_features] vector it is in nn::Linear. Other
// biases broadcast as an add. (x and weight have passed CheckLinearShapes.)
bool LinearRowFits(const Tensor& weight, const Tensor& bias) {
  return bias.defined() && bias.dim() == 1 && bias.size(0) == weight.size(0);
}

// The Linear or LinearRelu row over x's rows (batch dims folded), shaped back like x.
Tensor LinearRow(OpId op, const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const char* name = op == OpId::Linear ? "linear" : "linear_relu";
  const std::vector<Tensor> in = autocast_inputs(op, {x_in, weight_in, bias_in});
  const Tensor &x = in[0], &weight = in[1], &bias = in[2];
  CheckSameDtype(x, weight, name);
  CheckSameDtype(x, bias, name);
  ANVIL_CHECK(x.device() == weight.device() && x.device() == bias.device(), name,
              ": expected the input, weight and bias on one device, got ", x.device(), ", ", weight.device(), " and ",
              bias.device());
  const Tensor rows = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  const Tensor y = dispatch1(op, {rows, weight, bias}, OpAttrs{});
  if (x.dim() == 2) return y;
  IntArray out = x.sizes();
  out.back() = weight.size(0);
  return y.view(out);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckLinearShapes(x, weight);
  // One op where the bias is [out_features]: the bias seeds the output and the product
  // accumulates onto it.
  if (LinearRowFits(weight, bias)) return LinearRow(OpId::Linear, x, weight, bias);
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckLinearShapes(x, weight);
  if (LinearRowFits(weight, bias)) return LinearRow(OpId::LinearRelu, x, weight, bias);
  return relu(linear(x, weight, bias));
}

}  // namespace anvil
