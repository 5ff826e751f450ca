#include "tests/core/op_samples.h"

#include <algorithm>

namespace anvil::samples {
namespace {

using autograd::TensorFn;

Device g_sample_device = kCPU;

Tensor Leaf(IntArray s) { return randn(s, kFloat64).requires_grad_(); }
// A non-contiguous leaf: the transpose of a contiguous buffer.
Tensor LeafT(IntArray s) {
  std::reverse(s.begin(), s.end());
  return randn(s, kFloat64).t().detach().requires_grad_();
}
Tensor Pos(IntArray s) { return (rand(s, kFloat64) + 0.5).detach().requires_grad_(); }
Tensor Idx(std::vector<int64_t> v, IntArray shape = {}) {
  IntArray sh = shape.empty() ? IntArray{static_cast<int64_t>(v.size())} : shape;
  return tensor(v, sh).to(g_sample_device);
}

TensorFn U(Tensor (*f)(const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x[0])}; };
}
TensorFn B(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x[0], x[1])}; };
}
template <typename F>
TensorFn L(F f) {
  return [f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x)}; };
}

}  // namespace

OpSamples MakeOpSamples() {
  manual_seed(1234);
  OpSamples s;
  auto push = [&](OpId op, std::string name, std::vector<Tensor> in, TensorFn fn, bool second = true) {
    s[op].push_back({std::move(name), std::move(in), std::move(fn), second});
  };
  // Unary: contiguous and transposed inputs.
  struct U1 {
    OpId op;
    const char* name;
    Tensor (*f)(const Tensor&);
    bool positive;
  };
  const U1 unary[] = {
      {OpId::Neg, "neg", &neg, false},
      {OpId::Abs, "abs", &abs, false},
      {OpId::Exp, "exp", &exp, false},
      {OpId::Expm1, "expm1", &expm1, false},
      {OpId::Log, "log", &log, true},
      {OpId::Log1p, "log1p", &log1p, true},
      {OpId::Sqrt, "sqrt", &sqrt, true},
      {OpId::Rsqrt, "rsqrt", &rsqrt, true},
      {OpId::Reciprocal, "reciprocal", &reciprocal, true},
      {OpId::Sin, "sin", &sin, false},
      {OpId::Cos, "cos", &cos, false},
      {OpId::Tan, "tan", &tan, true},  // (0.5, 1.5): short of the pole at pi/2
      {OpId::Atan, "atan", &atan, false},
      {OpId::Tanh, "tanh", &tanh, false},
      {OpId::Sigmoid, "sigmoid", &sigmoid, false},
      {OpId::Relu, "relu", &relu, false},
      {OpId::Silu, "silu", &silu, false},
      {OpId::Hardswish, "hardswish", &hardswish, false},
      {OpId::Erf, "erf", &erf, false},
      {OpId::Sign, "sign", &sign, false},
      {OpId::Floor, "floor", &floor, false},
      {OpId::Ceil, "ceil", &ceil, false},
      {OpId::Round, "round", &round, false},
      {OpId::Trunc, "trunc", &trunc, false},
  };
  for (const U1& u : unary) {
    push(u.op, u.name, {u.positive ? Pos({3, 4}) : Leaf({3, 4})}, U(u.f));
    push(u.op, std::string(u.name) + "_noncontig",
         {u.positive ? Pos({4, 3}).t().detach().requires_grad_() : LeafT({3, 4})}, U(u.f));
  }
  push(OpId::LeakyRelu, "leaky_relu", {Leaf({5})}, L([](auto& x) { return leaky_relu(x[0], 0.2); }));
  push(OpId::Elu, "elu", {Leaf({5})}, L([](auto& x) { return elu(x[0], 1.3); }));
  push(OpId::Gelu, "gelu", {LeafT({3, 4})}, L([](auto& x) { return gelu(x[0]); }));
  push(OpId::Gelu, "gelu_tanh", {Leaf({6})}, L([](auto& x) { return gelu(x[0], "tanh"); }));
  push(OpId::Softplus, "softplus", {Leaf({6})}, L([](auto& x) { return softplus(x[0], 2.0, 3.0); }));
  push(OpId::PowScalar, "pow_scalar", {Pos({4})}, L([](auto& x) { return pow(x[0], 2.5); }));
  push(OpId::PowScalar, "pow_square", {LeafT({2, 3})}, L([](auto& x) { return pow(x[0], 2); }));
  push(OpId::Clamp, "clamp", {Leaf({8})}, L([](auto& x) { return clamp(x[0], -0.5, 0.5); }));
  // Binary: broadcasting and transposed operands.
  push(OpId::Add, "add_broadcast", {Leaf({3, 1}), LeafT({1, 4})}, L([](auto& x) { return add(x[0], x[1], 2.0); }));
  push(OpId::Sub, "sub_broadcast", {Leaf({2, 3}), Leaf({3})}, L([](auto& x) { return sub(x[0], x[1], 0.5); }));
  push(OpId::Mul, "mul_broadcast", {LeafT({3, 4}), Leaf({4})}, B(&mul));
  push(OpId::Div, "div", {Leaf({3, 4}), Pos({3, 1})}, B(&div));
  push(OpId::Pow, "pow", {Pos({3}), Leaf({2, 3})}, L([](auto& x) { return pow(x[0], x[1]); }));
  push(OpId::Maximum, "maximum", {Leaf({4}), Leaf({3, 4})}, B(&maximum));
  push(OpId::Minimum, "minimum", {Leaf({4}), LeafT({3, 4})}, B(&minimum));
  push(OpId::Remainder, "remainder", {Leaf({5}), (Pos({5}) + 1).detach().requires_grad_()}, B(&remainder), false);
  push(OpId::Atan2, "atan2", {Leaf({4}), Leaf({4})}, B(&atan2));
  // fmod: |b| away from 0 so that no quotient sits at a jump of trunc.
  push(OpId::Fmod, "fmod", {Leaf({5}), (Pos({5}) + 1).detach().requires_grad_()}, B(&fmod), false);
  push(OpId::Fmax, "fmax", {Leaf({4}), Leaf({3, 4})}, B(&fmax));
  push(OpId::Fmin, "fmin", {Leaf({3, 4}), Leaf({4})}, B(&fmin));
  // Losses: weighted mean with an ignored row (its target is out of range on purpose), and
  // per-row losses of a transposed input.
  push(OpId::NllLoss, "nll_loss_weighted_mean", {Leaf({4, 5})}, L([](auto& x) {
         const Tensor w = tensor(std::vector<double>{1.0, 2.0, 0.5, 3.0, 1.5}).to(g_sample_device);
         return nll_loss_rows(x[0], Idx({1, 0, -100, 4}), w, 1, -100)[0];
       }));
  push(OpId::NllLoss, "nll_loss_none", {LeafT({4, 5})}, L([](auto& x) {
         return nll_loss_rows(x[0], Idx({2, 2, 0, 3}), Tensor(), 0, -100)[0];
       }));
  push(OpId::ReluBackward, "relu_backward", {Leaf({3, 4}), LeafT({3, 4})}, B(&relu_backward));
  push(OpId::Where, "where", {Leaf({3, 1}), Leaf({4})}, L([](auto& x) {
         Tensor cond = tensor(std::vector<bool>{true, false, true, false}, IntArray{4}).to(g_sample_device);
         return where(cond, x[0], x[1]);
       }));
  push(OpId::Cast, "to_float32_and_back", {Leaf({3})}, L([](auto& x) { return (x[0] * 1.0).to(kFloat64); }));
  push(OpId::Clone, "clone", {LeafT({2, 3})}, L([](auto& x) { return x[0].clone() * x[0]; }));
  // Reductions.
  push(OpId::Sum, "sum_dims", {LeafT({3, 4})}, L([](auto& x) { return sum(x[0], {0}); }));
  push(OpId::Sum, "sum_all_keepdim", {Leaf({2, 3, 2})}, L([](auto& x) { return sum(x[0], {0, 2}, true); }));
  push(OpId::Mean, "mean", {Leaf({3, 4})}, L([](auto& x) { return mean(x[0], {1}, true); }));
  push(OpId::Prod, "prod", {Pos({3, 4})}, L([](auto& x) { return prod(x[0], {1}); }));
  push(OpId::Amax, "amax", {Leaf({3, 4})}, L([](auto& x) { return amax(x[0], {1}); }));
  push(OpId::Amin, "amin", {LeafT({3, 4})}, L([](auto& x) { return amin(x[0], {0}); }));
  push(OpId::MaxDim, "max_dim", {Leaf({3, 4})}, L([](auto& x) { return std::get<0>(max(x[0], 1)); }));
  push(OpId::MinDim, "min_dim_keepdim", {Leaf({3, 4})}, L([](auto& x) { return std::get<0>(min(x[0], 0, true)); }));
  push(OpId::Var, "var", {Leaf({3, 5})}, L([](auto& x) { return var(x[0], {1}, 1); }));
  push(OpId::Var, "std_all", {LeafT({3, 4})}, L([](auto& x) { return anvil::std(x[0], {}, 0); }));
  push(OpId::Norm, "norm2", {Leaf({3, 4})}, L([](auto& x) { return norm(x[0], 2, {1}); }));
  push(OpId::Norm, "norm1", {Leaf({6})}, L([](auto& x) { return norm(x[0], 1); }), false);
  push(OpId::Norm, "norm3", {Leaf({6})}, L([](auto& x) { return norm(x[0], 3); }));
  push(OpId::LogSumExp, "logsumexp", {LeafT({3, 4})}, L([](auto& x) { return logsumexp(x[0], {1}); }));
  push(OpId::CumSum, "cumsum", {Leaf({3, 4})}, L([](auto& x) { return cumsum(x[0], 1); }));
  push(OpId::CumProd, "cumprod_dim1", {Leaf({3, 4})}, L([](auto& x) { return cumprod(x[0], 1); }));
  // Columns with two zeros, one zero and none (the first-zero branch of the backward), scanned
  // through a transposed view.
  push(OpId::CumProd, "cumprod_zeros_noncontig",
       {(randn({5, 3}, kFloat64) *
         tensor(std::vector<double>{1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1}).reshape({5, 3}))
            .detach()
            .requires_grad_()},
       L([](auto& x) { return x[0].t().cumprod(1); }));
  push(OpId::LogCumSumExp, "logcumsumexp_dim1", {Leaf({3, 4})}, L([](auto& x) { return logcumsumexp(x[0], 1); }));
  push(OpId::LogCumSumExp, "logcumsumexp_dim0_noncontig", {LeafT({4, 3})},
       L([](auto& x) { return x[0].logcumsumexp(0); }));
  push(OpId::Mm, "mm_transposed", {LeafT({3, 4}), Leaf({4, 2})}, B(&mm));
  push(OpId::Mm, "mm_weight_transposed", {Leaf({3, 4}), LeafT({4, 2})}, B(&mm));  // Linear's x @ W.t()
  push(OpId::Linear, "linear", {Leaf({3, 4}), Leaf({2, 4}), Leaf({2})},
       L([](auto& x) { return linear(x[0], x[1], x[2]); }));
  push(OpId::Linear, "linear_batch_dims_noncontig", {Leaf({2, 3, 4}), LeafT({5, 4}), Leaf({5})},
       L([](auto& x) { return linear(x[0], x[1], x[2]); }));
  push(OpId::LinearRelu, "linear_relu", {Leaf({3, 4}), Leaf({2, 4}), Leaf({2})},
       L([](auto& x) { return linear_relu(x[0], x[1], x[2]); }));
  push(OpId::LinearRelu, "linear_relu_batch_dims_noncontig", {Leaf({2, 3, 4}), LeafT({5, 4}), Leaf({5})},
       L([](auto& x) { return linear_relu(x[0], x[1], x[2]); }));
  push(OpId::Bmm, "bmm", {Leaf({2, 3, 4}), Leaf({2, 4, 2})}, B(&bmm));
  push(OpId::Bmm, "matmul_broadcast_batch", {Leaf({2, 1, 3, 4}), Leaf({3, 4, 2})}, B(&matmul));
  push(OpId::Softmax, "softmax", {LeafT({3, 4})}, L([](auto& x) { return softmax(x[0], 1); }));
  push(OpId::LogSoftmax, "log_softmax", {Leaf({3, 4})}, L([](auto& x) { return log_softmax(x[0], 0); }));
  push(OpId::Cat, "cat", {Leaf({2, 3}), LeafT({1, 3})}, L([](auto& x) { return cat({x[0], x[1]}, 0); }));
  push(OpId::Cat, "stack", {Leaf({2, 3}), Leaf({2, 3})}, L([](auto& x) { return stack({x[0], x[1]}, 1); }));
  // Indexing.
  push(OpId::IndexSelect, "index_select_repeats", {LeafT({4, 3})}, L([](auto& x) {
         return index_select(x[0], 0, Idx({3, 0, 3}));
       }));
  push(OpId::Gather, "gather", {Leaf({3, 4})}, L([](auto& x) {
         return gather(x[0], 1, Idx({0, 3, 3, 1, 2, 2}, {3, 2}));
       }));
  push(OpId::Scatter, "scatter", {Leaf({3, 4}), Leaf({3, 3})}, L([](auto& x) {
         return scatter(x[0], 1, Idx({0, 1, 2, 3}, {2, 2}), x[1]);
       }));
  push(OpId::ScatterAdd, "scatter_add_repeats", {Leaf({3, 4}), Leaf({2, 3})}, L([](auto& x) {
         return scatter_add(x[0], 1, Idx({0, 0, 2, 3}, {2, 2}), x[1]);
       }));
  push(OpId::IndexAdd, "index_add", {Leaf({4, 3}), Leaf({2, 3})}, L([](auto& x) {
         return index_add(x[0], 0, Idx({1, 1}), x[1], 2.0);
       }));
  push(OpId::Index, "advanced_index", {Leaf({4, 5, 3})}, L([](auto& x) {
         return index(x[0], {Idx({0, 3, 3}), Tensor(), Idx({2, 0, 2})});
       }));
  push(OpId::Index, "bool_mask", {LeafT({3, 4})}, L([](auto& x) { return x[0].index({x[0].detach() > 0}); }));
  push(OpId::IndexPut, "index_put_accumulate", {Leaf({4, 3}), Leaf({3, 3})}, L([](auto& x) {
         return index_put(x[0], {Idx({1, 1, 2})}, x[1], true);
       }));
  push(OpId::IndexPut, "index_put_overwrite", {Leaf({4, 3}), Leaf({3})}, L([](auto& x) {
         return index_put(x[0], {Idx({0, 2})}, x[1]);
       }));
  push(OpId::Sort, "sort", {LeafT({3, 4})}, L([](auto& x) { return std::get<0>(sort(x[0], 1, true)); }));
  push(OpId::Sort, "topk", {Leaf({7})}, L([](auto& x) { return std::get<0>(topk(x[0], 3)); }));
  // Views.
  push(OpId::View, "view", {Leaf({2, 6})}, L([](auto& x) { return x[0].view({3, 4}) * 2; }));
  push(OpId::View, "reshape_noncontig", {LeafT({3, 4})}, L([](auto& x) { return x[0].reshape({12}); }));
  push(OpId::Permute, "permute", {Leaf({2, 3, 4})}, L([](auto& x) { return x[0].permute({2, 0, 1}).contiguous(); }));
  push(OpId::Expand, "expand", {Leaf({3, 1})}, L([](auto& x) { return x[0].expand({2, 3, 4}) * 1.5; }));
  push(OpId::AsStrided, "narrow_select", {LeafT({4, 5})}, L([](auto& x) { return x[0].narrow(1, 1, 2).select(0, 2); }));
  push(OpId::AsStrided, "slice_step", {Leaf({7, 2})}, L([](auto& x) { return x[0].slice(0, 1, 7, 2); }));
  push(OpId::AsStrided, "diagonal", {Leaf({4, 4})}, L([](auto& x) { return x[0].diagonal(1); }));
  push(OpId::AsStrided, "unfold_overlapping", {Leaf({7})}, L([](auto& x) { return x[0].unfold(0, 3, 2); }));
  push(OpId::AsStrided, "as_strided", {Leaf({6})}, L([](auto& x) { return x[0].as_strided({2, 2}, {1, 2}); }));
  push(OpId::StridedScatterAdd, "view_backward_twice", {Leaf({5})},
       L([](auto& x) { return x[0].narrow(0, 1, 3) * x[0].narrow(0, 0, 3); }));
  push(OpId::Im2Col, "im2col_stride_pad_dilation", {Leaf({2, 2, 5, 4})}, L([](auto& x) {
         return im2col(x[0], {{2, 3}, {2, 1}, {1, 0, 2, 1}, {1, 2}}) * 1.5;
       }));
  push(OpId::Col2Im, "col2im_overlapping", {Leaf({1, 2 * 4, 6})}, L([](auto& x) {
         return col2im(x[0], {3, 4}, {{2, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1}}) * 1.5;
       }));
  push(OpId::Conv2d, "conv2d_groups_stride_pad_dilation_bias", {Leaf({3, 4, 5, 6}), Leaf({6, 2, 2, 3}), Leaf({6})},
       L([](auto& x) {
         return convolution(x[0], x[1], x[2], {{2, 3}, {2, 1}, {1, 0, 2, 1}, {1, 2}}, 2);
       }));
  push(OpId::Conv2d, "conv2d_1x1_direct", {Leaf({2, 3, 3, 2}), Leaf({4, 3, 1, 1})},
       L([](auto& x) { return convolution(x[0], x[1], Tensor(), {}, 1); }));
  return s;
}

void set_sample_device(Device device) { g_sample_device = device; }
Device sample_device() { return g_sample_device; }

}  // namespace anvil::samples
