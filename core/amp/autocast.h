// Automatic mixed precision (docs/amp.md): inside an AutocastGuard, each op casts its
// floating-point inputs by its row's autocast policy (the op table's autocast column):
//   LowerPrecision  to the region's dtype (bfloat16 on the CPU by default, float16 on CUDA):
//                   matmuls, linear, convolutions
//   Float32         low-precision inputs to float32: exp/log/pow, softmax, losses, reductions
//                   that accumulate
//   Widest          mixed floating inputs to the widest of them: cat, index_put, scatter_add
//   NoCast          as they come (element-wise ops then promote as usual)
// A region is per thread and per device type, as PyTorch's. Casts are ordinary ops: autograd
// records them, so gradients reach float32 leaves in float32. Within the outermost enabled
// region, the cast of a leaf that requires grad (a weight) is cached: used twice, converted
// once; the cache empties when that region ends.
//
//   {
//     AutocastGuard amp(DeviceType::CPU);        // bfloat16
//     Tensor logits = model.forward(x);          // linear / conv in bfloat16
//     loss = cross_entropy(logits, y);           // in float32
//   }
//   loss.backward();                              // float32 gradients on the float32 weights
//
// Thread-safety: a region and its weight-cast cache are the calling thread's own
// (thread-local); the free functions may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/ops/op_table.h"
#include "core/tensor/device.h"
#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace anvil {

class AutocastGuard {
 public:
  // dtype: kBFloat16 or kFloat16 (default: bfloat16 on the CPU, float16 on CUDA). enabled =
  // false disables autocast for the device type inside an enabled region.
  explicit AutocastGuard(DeviceType device, std::optional<ScalarType> dtype = {}, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  ScalarType prev_dtype_;
};

namespace autocast {

// AMP anomaly detection, the pitfall guide's first step when mixed precision gives NaN or inf:
// while an AnomalyGuard lives on this thread, every op run inside an enabled autocast region
// whose output is bfloat16 or float16 has that output checked, and the first non-finite value
// throws AmpAnomalyError naming the op, the output's dtype and each input's dtype, shape and
// range, so the layer to keep in float32 is known (nn::Module::set_autocast(false), "autocast":
// false in a model spec). One host read per such op: a debugging aid, not for production runs.
class AnomalyGuard {
 public:
  explicit AnomalyGuard(bool enabled = true);
  ~AnomalyGuard();
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

class AmpAnomalyError : public Error {
 public:
  using Error::Error;
};

// The service's precision names ("fp32", "bf16", "fp16": JobSpec.precision, a model's
// serving precision) as dtypes; throws anvil::Error naming the three for anything else.
ScalarType precision_dtype(std::string_view name);

bool is_enabled(DeviceType device);
ScalarType dtype(DeviceType device);

// The cast cache of this thread's current region: hits and entries (for tests and metrics).
struct CacheStats {
  int64_t hits = 0, misses = 0, entries = 0;
};
CacheStats cache_stats();

namespace detail {
extern thread_local bool t_any_enabled;  // some device type is enabled (not inside a kernel)
extern thread_local bool t_anomaly;      // an AnomalyGuard is on
// The anomaly check of one op's outputs (the dispatcher calls it while t_anomaly is set).
void check_outputs(OpId op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
// The inputs `op` should run on, by its row's policy (the dispatcher calls this).
std::vector<Tensor> cast_inputs(OpId op, const std::vector<Tensor>& inputs, Device device);
// Kernels may run ops internally: those are not autocast.
class KernelScope {
 public:
  KernelScope() : prev_(t_any_enabled) {
    if (prev_) t_any_enabled = false;
  }
  ~KernelScope() {
    if (prev_) t_any_enabled = true;
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  bool prev_;
};
}  // namespace detail

}  // namespace autocast
}  // namespace anvil
