// Non-tensor arguments of an op call, in one plain struct every row reads what it needs
// from (like ggml's op params). Fields are named for their most common use; each op's
// wrapper in core/ops/*.cc documents which fields it sets.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor/dtype.h"
#include "core/tensor/tensor_impl.h"
#include "core/ops/window_args.h"

namespace anvil {

// A strided window: sizes and strides in elements, offset in elements.
struct Geometry {
  IntArray sizes, strides;
  int64_t offset = 0;
};

// How a view is derived from its input's geometry. Applying the same function to the
// input's real geometry (forward), to its contiguous layout (backward) and to its place in
// the root base (NOTE [ View tracking ]) keeps the three consistent by construction.
struct ViewFn {
  enum Kind : int8_t { Reshape, Permute, Expand, Narrow, Select, Slice, Diagonal, Unfold, Strided };
  Kind kind = Reshape;
  IntArray sizes;    // Reshape/Expand/Strided: target sizes; Permute: the permutation
  IntArray strides;  // Strided only
  int64_t dim = 0, dim2 = 1;  // Narrow/Select/Slice/Unfold: dim; Diagonal: dim1, dim2
  int64_t start = 0;          // Narrow/Slice start, Select index, Diagonal offset, Strided offset
  int64_t length = 0;         // Narrow/Slice length, Unfold size
  int64_t step = 1;           // Slice/Unfold step
};

// Applies `fn` to `in`; returns nullopt when the view cannot be expressed on that geometry
// (only possible for Reshape, whose strides depend on the input's).
std::optional<Geometry> apply_view(const ViewFn& fn, const Geometry& in);

// The hyper-parameters of one fused optimizer step (the SgdStep / AdamStep rows), already
// resolved for the step being taken: bias corrections are those of its step count.
struct OptimizerStepAttrs {
  double lr = 0, weight_decay = 0;
  double momentum = 0, dampening = 0;  // SGD
  bool nesterov = false;               // SGD
  bool first_step = false;             // SGD: the momentum buffers hold nothing yet
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam
  double bias_correction1 = 1, bias_correction2 = 1;  // Adam: 1 - beta^t
  bool decoupled = false;  // AdamW: p *= 1 - lr * wd instead of adding wd * p to the gradient
  bool amsgrad = false;
};

// How scatter_reduce combines a source element with its destination (mean is a sum and a
// count, in ops/indexing.cc).
enum ScatterReduceMode : int64_t { kScatterSum = 0, kScatterProd = 1, kScatterAmax = 2, kScatterAmin = 3 };

struct OpAttrs {
  IntArray dims;             // reduction dims (empty = all), cat/softmax/cumsum dim in dims[0]
  bool keepdim = false;      // reductions; also: IndexPut accumulate, Sort descending,
                             // Gelu tanh approximation, Scatter "use value"
  double alpha = 1;          // Add/Sub alpha, PowScalar exponent, Clamp min, LeakyRelu slope,
                             // Elu alpha, Softplus beta, Var correction, Norm p, Fill value,
                             // IndexAdd alpha, Arange start, Uniform low, Normal mean, Bernoulli p
  double beta = 0;           // Clamp max, Softplus threshold, Arange step, Uniform high,
                             // Normal std
  double gamma = 0;          // Arange in linspace mode (keepdim): the exact end value
  bool has_alpha = true;     // Clamp: lower bound present
  bool has_beta = true;      // Clamp: upper bound present
  int64_t dim = 0;           // gather/scatter/index_select/index_add dim
  int64_t mode = 0;          // ScatterReduce: ScatterReduceMode (sum, prod, amax, amin)
  ScalarType dtype = kFloat32;  // Cast target
  ViewFn view;               // View rows
  Geometry geometry;         // StridedScatterAdd: window in a contiguous buffer of `dims` sizes
  uint64_t seed = 0, offset = 0;  // random fills: Philox key and counter
  IntArray indexed_dims;     // Index/IndexPut: which dims of self the index tensors address
  OptimizerStepAttrs optim;  // SgdStep/AdamStep
  WindowArgs window;         // Im2Col, Col2Im, Conv2d and its gradient rows
};

}  // namespace anvil
