// The typed non-tensor arguments of the op table's rows: each row names its struct in the
// table's Args column, so a kernel, a backward rule or an exporter reads named fields
// (`ReduceArgs::keepdim`, `ScatterArgs::mode`), never a shared slot whose meaning depends on
// the row. OpAttrs (core/ops/attrs.h) carries one of them.
#pragma once

#include <cstdint>
#include <optional>

#include "core/ops/nll_loss.h"
#include "core/ops/window_args.h"
#include "core/tensor/dtype.h"
#include "core/tensor/tensor_impl.h"

namespace anvil {

// Rows without arguments (and the default of every row: an empty OpAttrs means "the row's
// defaults", as a call that passes no keyword arguments).
struct NoArgs {};

// add/sub: out = x + alpha * y.
struct ScaleArgs {
  double alpha = 1;
};

// pow(tensor, scalar).
struct PowScalarArgs {
  double exponent = 1;
};

// clamp: either bound may be absent (not both).
struct ClampArgs {
  std::optional<double> min, max;
};

struct LeakyReluArgs {
  double negative_slope = 0.01;
};

struct EluArgs {
  double alpha = 1;
};

struct GeluArgs {
  bool tanh_approximation = false;  // approximate="tanh"
};

// softplus: log1p(exp(beta * x)) / beta, linear above beta * x > threshold.
struct SoftplusArgs {
  double beta = 1, threshold = 20;
};

struct CastArgs {
  ScalarType dtype = kFloat32;
};

// The reduction rows. `dims` empty = all dims.
struct ReduceArgs {
  IntArray dims;
  bool keepdim = false;
  double correction = 1;  // var: Bessel's correction (divides by n - correction)
  double p = 2;           // norm: the order (finite, > 0: the others are composed in ops/reduce.cc)
};

// Rows that work along one dimension: cumsum, logcumsumexp, softmax, log_softmax and their
// gradient rows, cat.
struct DimArgs {
  int64_t dim = 0;
};

// nll_loss and its gradient row.
struct NllLossArgs {
  nll::Reduction reduction = nll::kMean;
  int64_t ignore_index = -100;
  int64_t num_classes = 0;  // the gradient row: C, the width of the gradient it writes
};

// gather, index_select, index_add.
struct IndexArgs {
  int64_t dim = 0;
  double alpha = 1;  // index_add: self[index] += alpha * source
};

// How scatter_reduce combines a source element with its destination (mean is a sum and a
// count, in ops/indexing.cc).
enum ScatterReduceMode : int8_t { kScatterSum = 0, kScatterProd = 1, kScatterAmax = 2, kScatterAmin = 3 };

// scatter, scatter_add, scatter_reduce.
struct ScatterArgs {
  int64_t dim = 0;
  ScatterReduceMode mode = kScatterSum;  // scatter_reduce
};

// index (x[i0, i1, ...]) and index_put.
struct AdvancedIndexArgs {
  IntArray indexed_dims;    // which dims of self the index tensors address
  bool accumulate = false;  // index_put: repeated indices add up
};

struct SortArgs {
  int64_t dim = -1;
  bool descending = false;
};

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
  // Strided only: the input's own strides where it was not contiguous. as_strided's sizes and
  // strides address the storage, so its gradient maps through both geometries (empty: the
  // input was contiguous).
  IntArray source_strides;
  int64_t dim = 0, dim2 = 1;  // Narrow/Select/Slice/Unfold: dim; Diagonal: dim1, dim2
  int64_t start = 0;          // Narrow/Slice start, Select index, Diagonal offset, Strided offset
  int64_t length = 0;         // Narrow/Slice length, Unfold size
  int64_t step = 1;           // Slice/Unfold step
};

// The view rows: how the view is derived and the sizes of the tensor it was taken of.
struct ViewArgs {
  ViewFn fn;
  IntArray input_sizes;
};

// strided_scatter_add: out = zeros(sizes); out.as_strided(window) += src.
struct StridedScatterArgs {
  IntArray sizes;
  Geometry window;
};

struct FillArgs {
  double value = 0;
};

// arange: start + i * step. linspace sets `symmetric`: the second half counts back from
// `end` (exactly `end` at the last element), as PyTorch's.
struct ArangeArgs {
  double start = 0, step = 1, end = 0;
  bool symmetric = false;
};

// A Philox key and counter reserved for one random fill (core/ops/random_draws.h).
struct PhiloxArgs {
  uint64_t seed = 0, offset = 0;
};

struct UniformArgs {
  double low = 0, high = 1;
  PhiloxArgs philox;
};

struct NormalArgs {
  double mean = 0, std = 1;
  PhiloxArgs philox;
};

// bernoulli: probability `p` for every element, unless a tensor of probabilities is given.
struct BernoulliArgs {
  double p = 0.5;
  PhiloxArgs philox;
};

// The hyper-parameters of one fused optimizer step (the SgdStep / AdamStep / RmspropStep rows),
// already resolved for the step being taken: bias corrections are those of its step count.
struct OptimizerStepArgs {
  double lr = 0, weight_decay = 0;
  double momentum = 0, dampening = 0;                 // SGD (momentum: RMSprop too)
  bool nesterov = false;                              // SGD
  bool first_step = false;                            // SGD: the momentum buffers hold nothing yet
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;      // Adam
  double bias_correction1 = 1, bias_correction2 = 1;  // Adam: 1 - beta^t
  bool decoupled = false;  // AdamW: p *= 1 - lr * wd instead of adding wd * p to the gradient
  bool amsgrad = false;
  double alpha = 0.99;    // RMSprop: the square average's smoothing (eps above is RMSprop's too)
  bool centered = false;  // RMSprop: divide by the gradient's estimated standard deviation
  // The last input is a float32 [1] flag on the lists' device (GradScaler's found_inf): when it
  // is non-zero the kernel writes nothing. The decision is made where the data is, so the host
  // never waits for the flag.
  bool skip_if_found_inf = false;
  // Adam and RMSprop: after the lists come one float64 [3] step count per parameter
  // (fn::AdamStepCount; RMSprop uses only its t), advanced by the kernel when the step is
  // taken; Adam's bias corrections above are then unused.
  bool device_step_counts = false;
};

// Every argument struct, in the order of OpAttrs's variant (the table's Args column names
// one of them per row).
// clang-format off
#define ANVIL_OP_ARGS(X) \
  X(NoArgs) \
  X(ScaleArgs) \
  X(PowScalarArgs) \
  X(ClampArgs) \
  X(LeakyReluArgs) \
  X(EluArgs) \
  X(GeluArgs) \
  X(SoftplusArgs) \
  X(CastArgs) \
  X(ReduceArgs) \
  X(DimArgs) \
  X(NllLossArgs) \
  X(IndexArgs) \
  X(ScatterArgs) \
  X(AdvancedIndexArgs) \
  X(SortArgs) \
  X(ViewArgs) \
  X(StridedScatterArgs) \
  X(WindowArgs) \
  X(FillArgs) \
  X(ArangeArgs) \
  X(UniformArgs) \
  X(NormalArgs) \
  X(BernoulliArgs) \
  X(OptimizerStepArgs)
// clang-format on

}  // namespace anvil
