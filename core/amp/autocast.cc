#include "core/amp/autocast.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

struct DeviceState {
  bool enabled = false;
  ScalarType dtype = kBFloat16;
};

struct CacheEntry {
  Tensor source;  // kept alive, so the key's address is not reused while cached
  uint64_t version = 0;
  Tensor cast;
};

struct ThreadState {
  DeviceState devices[2] = {{false, kBFloat16}, {false, kFloat16}};
  int depth = 0;  // enabled regions open on this thread
  absl::flat_hash_map<std::pair<const TensorImpl*, int>, CacheEntry> cache;
  autocast::CacheStats stats;
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

int Index(DeviceType d) { return d == DeviceType::CUDA ? 1 : 0; }

void Refresh(ThreadState& s) { autocast::detail::t_any_enabled = s.devices[0].enabled || s.devices[1].enabled; }

bool IsLow(ScalarType t) { return t == kBFloat16 || t == kFloat16; }

// `t` as dtype `to`, through the region's cache for leaves that require grad (weights).
Tensor Cast(const Tensor& t, ScalarType to) {
  ThreadState& s = State();
  const bool cacheable = GradMode::is_enabled() && t.requires_grad() && t.is_leaf();
  if (!cacheable) return t.to(to);
  const auto key = std::make_pair(static_cast<const TensorImpl*>(t.impl()), static_cast<int>(to));
  auto it = s.cache.find(key);
  if (it != s.cache.end() && it->second.version == t._version()) {
    ++s.stats.hits;
    return it->second.cast;
  }
  ++s.stats.misses;
  Tensor cast = t.to(to);
  s.cache[key] = CacheEntry{t, t._version(), cast};
  s.stats.entries = static_cast<int64_t>(s.cache.size());
  return cast;
}

}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, std::optional<ScalarType> dtype, bool enabled) : device_(device) {
  ThreadState& s = State();
  DeviceState& d = s.devices[Index(device)];
  const ScalarType want = dtype.value_or(device == DeviceType::CUDA ? kFloat16 : kBFloat16);
  ANVIL_CHECK(IsLow(want), "AutocastGuard: expected bfloat16 or float16, got ", want);
  prev_enabled_ = d.enabled;
  prev_dtype_ = d.dtype;
  d.enabled = enabled;
  d.dtype = want;
  if (enabled) ++s.depth;
  Refresh(s);
}

AutocastGuard::~AutocastGuard() {
  ThreadState& s = State();
  DeviceState& d = s.devices[Index(device_)];
  if (d.enabled && --s.depth == 0) {
    s.cache.clear();  // the outermost region ends: its casts go with it
    s.stats = {};
  }
  d.enabled = prev_enabled_;
  d.dtype = prev_dtype_;
  Refresh(s);
}

namespace autocast {

bool is_enabled(DeviceType device) { return State().devices[Index(device)].enabled; }
ScalarType dtype(DeviceType device) { return State().devices[Index(device)].dtype; }
CacheStats cache_stats() { return State().stats; }

ScalarType precision_dtype(std::string_view name) {
  if (name == "fp32") return kFloat32;
  if (name == "bf16") return kBFloat16;
  if (name == "fp16") return kFloat16;
  throw Error(anvil::detail::StrCat("precision: expected \"fp32\", \"bf16\" or \"fp16\", got \"", name, "\""));
}

AnomalyGuard::AnomalyGuard(bool enabled) : prev_(detail::t_anomaly) { detail::t_anomaly = enabled; }
AnomalyGuard::~AnomalyGuard() { detail::t_anomaly = prev_; }

namespace detail {

thread_local bool t_any_enabled = false;
thread_local bool t_anomaly = false;

void check_outputs(OpId op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  // The checks are ops: not autocast, not recorded, not checked themselves.
  KernelScope not_autocast;
  NoGradGuard no_grad;
  AnomalyGuard not_checked(false);
  for (const Tensor& out : outputs) {
    if (!out.defined() || !IsLow(out.dtype()) || out.numel() == 0) continue;
    const Tensor wide = out.to(kFloat32);
    if (isfinite(wide).all().item<bool>()) continue;
    const bool has_nan = isnan(wide).any().item<bool>();
    std::string ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      if (!t.defined()) continue;
      ins += anvil::detail::StrCat(ins.empty() ? "" : "; ", "input ", i, ": ", t.dtype(), " ", shape_str(t.sizes()));
      if (is_floating_point(t.dtype()) && t.numel() > 0) {
        const Tensor w = t.to(kFloat64);
        const bool finite = isfinite(w).all().item<bool>();
        ins += anvil::detail::StrCat(" in [", w.min().item<double>(), ", ", w.max().item<double>(), "]",
                                     finite ? "" : " (already not finite: the problem is upstream)");
      }
    }
    throw autocast::AmpAnomalyError(
        anvil::detail::StrCat("AMP anomaly: ", op_name(op), " produced ", has_nan ? "NaN" : "inf", " in its ",
                              out.dtype(), " output ", shape_str(out.sizes()), " (", ins,
                              "). Keep this layer in float32 (\"autocast\": false on it in the model "
                              "spec, or Module::set_autocast(false)), or bring its inputs into the ",
                              out.dtype(), " range"));
  }
}

std::vector<Tensor> cast_inputs(OpId op, const std::vector<Tensor>& inputs, Device device) {
  const DeviceState& d = State().devices[Index(device.type)];
  if (!d.enabled) return inputs;
  const AutocastPolicy policy = op_info(op).autocast;
  if (policy == AutocastPolicy::NoCast) return inputs;
  std::vector<Tensor> out = inputs;
  // Casts are ops too: they must not be autocast themselves.
  KernelScope not_autocast;
  switch (policy) {
    case AutocastPolicy::LowerPrecision:
      for (Tensor& t : out) {
        if (t.defined() && is_floating_point(t.dtype()) && t.dtype() != d.dtype) t = Cast(t, d.dtype);
      }
      break;
    case AutocastPolicy::Float32:
      for (Tensor& t : out) {
        if (t.defined() && IsLow(t.dtype())) t = Cast(t, kFloat32);
      }
      break;
    case AutocastPolicy::Widest: {
      std::optional<ScalarType> widest;
      for (const Tensor& t : out) {
        if (t.defined() && is_floating_point(t.dtype()))
          widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
      }
      if (widest) {
        for (Tensor& t : out) {
          if (t.defined() && is_floating_point(t.dtype()) && t.dtype() != *widest) t = Cast(t, *widest);
        }
      }
      break;
    }
    case AutocastPolicy::NoCast:
      break;
  }
  return out;
}

}  // namespace detail
}  // namespace autocast
}  // namespace anvil
