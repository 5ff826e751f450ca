// The engine's functional API, named after PyTorch's (torch.* / at::*). Every function
// broadcasts, promotes types like PyTorch and accepts non-contiguous inputs.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil {

struct TensorOptions {
  ScalarType dtype = kFloat32;
  bool dtype_given = false;  // arange infers int64 from integer bounds unless a dtype is given
  Device device = kCPU;
  bool requires_grad = false;
  TensorOptions() = default;
  TensorOptions(ScalarType d) : dtype(d), dtype_given(true) {}  // NOLINT
  TensorOptions(Device dev) : device(dev) {}                    // NOLINT
  TensorOptions& with_dtype(ScalarType d) {
    dtype = d;
    dtype_given = true;
    return *this;
  }
  TensorOptions& with_device(Device d) {
    device = d;
    return *this;
  }
  TensorOptions& with_requires_grad(bool r = true) {
    requires_grad = r;
    return *this;
  }
};

// ---- factories ----
Tensor empty(IntArray sizes, TensorOptions opts = {});
Tensor empty_strided(IntArray sizes, IntArray strides, TensorOptions opts = {});
Tensor zeros(IntArray sizes, TensorOptions opts = {});
Tensor ones(IntArray sizes, TensorOptions opts = {});
Tensor full(IntArray sizes, Scalar value, TensorOptions opts = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor scalar_tensor(Scalar value, TensorOptions opts = {});
Tensor arange(Scalar end, TensorOptions opts = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions opts = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, std::optional<int64_t> m = {}, TensorOptions opts = {});
// Copies `data` into a new tensor of the given shape (default: 1-D).
template <typename T>
Tensor tensor(const std::vector<T>& data, std::optional<IntArray> sizes = {},
              TensorOptions opts = TensorOptions(CppTypeToScalarType<T>::value));
Tensor tensor(std::initializer_list<double> data, TensorOptions opts = {});
// Integer and bool literals keep their kind, as torch.tensor([1, 2, 3]) is int64 and
// torch.tensor([True, False]) bool (a float32 default here was a porting trap). A mixed list
// ({1, 2.5}) is ambiguous and does not compile: write 1.0.
Tensor tensor(std::initializer_list<int> data, TensorOptions opts = {});
Tensor tensor(std::initializer_list<bool> data, TensorOptions opts = {});
// Wraps external memory without copying; `deleter` (may be empty) runs when no tensor uses
// it any more.
Tensor from_blob(void* data, IntArray sizes, ScalarType dtype, std::function<void(void*)> deleter = {},
                 Device device = kCPU);

// ---- random (from the seedable Philox generator; core/tensor/random.h) ----
Tensor rand(IntArray sizes, TensorOptions opts = {});
Tensor randn(IntArray sizes, TensorOptions opts = {});
Tensor randint(int64_t low, int64_t high, IntArray sizes, TensorOptions opts = kInt64);
Tensor randperm(int64_t n, TensorOptions opts = kInt64);
Tensor bernoulli(const Tensor& p);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
void manual_seed(uint64_t seed);

// ---- element-wise ----
// The rows whose Api column generates their function (op_table.def; defined in
// core/ops/generated_api.cc): `Tensor name(const Tensor&)`, or `(const Tensor&, int64_t dim)`.
#define ANVIL_API_FnMethod(Id, name) Tensor name(const Tensor& x);
#define ANVIL_API_FnMethodInplace ANVIL_API_FnMethod
#define ANVIL_API_FnDim(Id, name) Tensor name(const Tensor& x, int64_t dim);
#include "core/ops/op_api_rows.def"
Tensor square(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// relu's backward in one pass: grad where result > 0, else 0 (PyTorch's threshold_backward).
Tensor relu_backward(const Tensor& grad, const Tensor& result);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor pow(const Tensor& x, Scalar exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor pow(Scalar base, const Tensor& exponent);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
// Tensor bounds (broadcast; an undefined tensor is no bound): minimum(maximum(x, min), max),
// so at a bound the gradient splits between x and the bound as PyTorch's does.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor atan2(const Tensor& a, const Tensor& b);
// C's fmod: the remainder of truncated division, with the dividend's sign (remainder() takes
// the divisor's, as Python's %). Integer division by zero is an error.
Tensor fmod(const Tensor& a, const Tensor& b);
// maximum / minimum that ignore a NaN (NaN only where both are); maximum/minimum propagate it.
Tensor fmax(const Tensor& a, const Tensor& b);
Tensor fmin(const Tensor& a, const Tensor& b);
// a // b, rounded down; integer inputs stay integers. Not differentiable (PyTorch: zeros).
Tensor floor_divide(const Tensor& a, const Tensor& b);
// PyTorch's div(a, b, rounding_mode): "" (true division), "trunc" or "floor".
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, Scalar b);
Tensor lerp(const Tensor& a, const Tensor& b, Scalar weight);
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);
// The dtype PyTorch would compute a binary op in (wrapped numbers rank lowest).
ScalarType result_type(const Tensor& a, const Tensor& b);
// A 0-dim "wrapped number" tensor (lowest priority in type promotion).
Tensor wrap_scalar(Scalar s, Device device = kCPU);

// ---- reductions (dims empty = all dims) ----
Tensor sum(const Tensor& x, IntArray dims = {}, bool keepdim = false, std::optional<ScalarType> dtype = {});
Tensor mean(const Tensor& x, IntArray dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, IntArray dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, IntArray dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArray dims = {}, bool keepdim = false);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor var(const Tensor& x, IntArray dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, IntArray dims = {}, int64_t correction = 1, bool keepdim = false);
// p = 0 counts nonzeros (zero gradient), p = -inf is the smallest magnitude, other negative p
// the power mean (sum |x|^p)^(1 / p), as torch.linalg.vector_norm.
Tensor norm(const Tensor& x, double p = 2, IntArray dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntArray dims, bool keepdim = false);
Tensor all(const Tensor& x, IntArray dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, IntArray dims = {}, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim);
// The running product; integers (and bool) promote to int64, as cumsum.
Tensor cumprod(const Tensor& x, int64_t dim);

// ---- linear algebra ----
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
// {mm(a0, b0), mm(a1, b1)}: two independent products, such as a matrix product's two
// gradients. On the CPU, with history off and both products large, they run side by side
// on the pool, one thread each: two whole products keep both cores busy, where one product
// split by rows runs ~1.6x faster, not 2x (each half re-packs the shared operand). The
// choice depends only on the shapes, device and thread count, so runs repeat bitwise.
std::array<Tensor, 2> mm_pair(const Tensor& a0, const Tensor& b0, const Tensor& a1, const Tensor& b1);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)) as one op (the relu applied to each output row while it is
// in cache; its backward masks the gradient once). The same values and gradients as the
// two ops. bias: [out_features].
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor outer(const Tensor& a, const Tensor& b);
Tensor dot(const Tensor& a, const Tensor& b);

// ---- losses ----
// The negative log-likelihood of rows of log-probabilities [M, C] at int64 targets [M], with
// optional class weights [C]; rows whose target is ignore_index count for nothing. reduction:
// nll::Reduction (0 none, 1 mean over the counted weight, 2 sum). Returns {loss, total weight}.
// The loss functions of nn (nll_loss, cross_entropy) shape their inputs into rows for it.
std::array<Tensor, 2> nll_loss_rows(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                    int64_t reduction, int64_t ignore_index);

// ---- softmax family ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- joining and splitting ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, IntArray sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- indexing ----
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, Scalar value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// PyTorch's scatter_reduce: reduce "sum", "prod", "mean", "amax" or "amin"; include_self = false
// leaves the destination's own value out where a source lands. Not differentiable yet.
Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self = true);
// The older spelling, Tensor.scatter(dim, index, src, reduce="add" | "multiply").
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1);
// Advanced indexing: x[i0, i1, ...] with optional (undefined = full slice) index tensors,
// broadcast together (PyTorch's semantics for where the indexed dims land).
Tensor index(const Tensor& x, const std::vector<Tensor>& indices);
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);
Tensor& index_put_(Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_select(const Tensor& x, const Tensor& mask);
Tensor nonzero(const Tensor& x);
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The k largest (or smallest) along dim, always sorted; ties in input order (docs/conformance.md).
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// The k-th smallest (k from 1) along dim and its index; NaN counts as the largest.
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
// The lower median of all elements (NaN if any is NaN; NaN for an empty tensor).
Tensor median(const Tensor& x);
// The lower median along dim and its index; a row holding NaN gives NaN and its first NaN's index.
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
// Whether each element is +-inf (bool; integers never are).
Tensor isinf(const Tensor& x);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- convolution windows (torch.nn.functional.unfold / fold) ----
// The sliding windows of x [N, C, H, W] as columns [N, C * KH * KW, OH * OW] (row
// (c * KH + i) * KW + j holds input channel c at kernel offset (i, j)); positions in the
// zero padding read 0. padding = {top, bottom, left, right}.
struct WindowParams {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 4> padding{0, 0, 0, 0};
  std::array<int64_t, 2> dilation{1, 1};
};
Tensor im2col(const Tensor& x, const WindowParams& p);
// The adjoint of im2col: sums each column entry back into its input position; output
// [N, C, H, W] for output_size {H, W}.
Tensor col2im(const Tensor& cols, std::array<int64_t, 2> output_size, const WindowParams& p);
// Where max pooling of x [N, C, H, W] takes each output from: int64 plane indices (y * W + x)
// [N, C, OH, OW], PyTorch's choice (the first of equal maxima, the last NaN; padding, which
// padding = {top, bottom, left, right} adds around the image, is never chosen). Not
// differentiable: the pooled values are gather(x, indices) over the flattened planes.
Tensor max_pool2d_indices(const Tensor& x, const WindowParams& p);
// A 2-D convolution (cross-correlation) of x [N, C, H, W] with weight [OC, C / groups, KH, KW]
// and an optional bias [OC]: one fused op (per image: im2col into a reused buffer, then
// GEMMs), so the columns never leave the cache. Checked arguments: nn::functional::conv2d.
Tensor convolution(const Tensor& x, const Tensor& weight, const Tensor& bias, const WindowParams& p, int64_t groups);

// ---- shape ----
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
IntArray broadcast_shapes(const IntArray& a, const IntArray& b);
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors);

// ---- rearranging, differences and running extremes (core/ops/composites.cc) ----
// Reverses the order along each of dims (distinct; none is a copy).
Tensor flip(const Tensor& x, IntArray dims);
// Shifts elements along each dims[i] by shifts[i], wrapping around; with no dims, the
// flattened tensor is rolled by the one shift and reshaped back.
Tensor roll(const Tensor& x, IntArray shifts, IntArray dims = {});
// The lower (upper) triangle of the last two dims: elements with col - row <= diagonal
// (>= diagonal) kept, the rest zero (NaN included, as PyTorch selects rather than multiplies).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// The n-th forward difference along dim of cat({prepend, x, append}, dim) (either may be
// undefined; each has x's number of dims); bool inputs use logical_xor, as PyTorch's.
Tensor diff(const Tensor& x, int64_t n = 1, int64_t dim = -1, const Tensor& prepend = Tensor(),
            const Tensor& append = Tensor());
// log(exp(a) + exp(b)) without overflow; equal infinities give themselves.
Tensor logaddexp(const Tensor& a, const Tensor& b);
// NaN, +inf and -inf replaced (defaults: 0, the dtype's largest and lowest finite values);
// integer and bool tensors come back as a copy.
Tensor nan_to_num(const Tensor& x, std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
// The number of non-zero elements over dims (all dims when empty), as int64.
Tensor count_nonzero(const Tensor& x, IntArray dims = {});
// The running maximum (minimum) along dim and where it came from: the last index of equal
// extremes, the first NaN once one is seen (PyTorch's rule). The gradient goes to that index.
std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);
// log(x / (1 - x)), with x first clamped to [eps, 1 - eps] when eps is given (zero gradient
// outside that range).
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt);
// For each value, the index into the innermost dim of sorted_sequence (1-D, or with the
// values' leading dims) where it would be inserted keeping the order: before equal entries,
// or after them when right. int64, or int32 when out_int32.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false, bool right = false);
// searchsorted(boundaries, input) with 1-D boundaries.
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32 = false, bool right = false);
// Coordinate grids from 0-D or 1-D tensors of one dtype and device: "ij" gives output i the
// shape (n0, n1, ...), "xy" swaps the first two dims (Cartesian indexing). Expanded views.
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing = "ij");

// ---- comparisons of whole tensors ----
bool equal(const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace anvil
