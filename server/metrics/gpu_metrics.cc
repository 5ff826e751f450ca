#include "server/metrics/gpu_metrics.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace anvil::server::metrics {
namespace {

// The few NVML declarations used, from the driver's documented C ABI (nvml.h is not needed
// to build): every call returns 0 (NVML_SUCCESS) on success; handles are opaque pointers.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;     // percent of the last sample period a kernel ran
  unsigned int memory;  // percent of it memory was read or written
};
struct NvmlMemory {
  unsigned long long total, free, used;  // bytes
};
constexpr NvmlReturn kNvmlSuccess = 0;

}  // namespace

struct GpuMetrics::Nvml {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*device_count)(unsigned int*) = nullptr;
  NvmlReturn (*device_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;  // optional
  std::vector<NvmlDevice> devices;
  bool initialised = false;

  ~Nvml() {
    if (initialised) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
};

namespace {

template <typename Fn>
bool Bind(void* handle, const char* symbol, Fn& fn, std::string* missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn == nullptr && missing->empty()) *missing = symbol;
  return fn != nullptr;
}

}  // namespace

std::string default_nvml_library() {
  const char* env = std::getenv("ANVIL_NVML_LIBRARY");
  return env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
}

std::unique_ptr<GpuMetrics> GpuMetrics::Open(Registry& registry, const std::string& library, std::string* why_not) {
  std::string ignored;
  std::string& why = why_not != nullptr ? *why_not : ignored;
  auto nvml = std::make_unique<Nvml>();
  nvml->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->handle == nullptr) {
    why = "cannot load " + library + " (no NVIDIA driver)";
    return nullptr;
  }
  std::string missing;
  Bind(nvml->handle, "nvmlInit_v2", nvml->init, &missing);
  Bind(nvml->handle, "nvmlShutdown", nvml->shutdown, &missing);
  Bind(nvml->handle, "nvmlDeviceGetCount_v2", nvml->device_count, &missing);
  Bind(nvml->handle, "nvmlDeviceGetHandleByIndex_v2", nvml->device_by_index, &missing);
  Bind(nvml->handle, "nvmlDeviceGetUtilizationRates", nvml->utilization, &missing);
  Bind(nvml->handle, "nvmlDeviceGetMemoryInfo", nvml->memory, &missing);
  Bind(nvml->handle, "nvmlDeviceGetName", nvml->name, &missing);
  nvml->by_pci_bus_id =
      reinterpret_cast<decltype(nvml->by_pci_bus_id)>(dlsym(nvml->handle, "nvmlDeviceGetHandleByPciBusId_v2"));
  if (!missing.empty()) {
    why = library + " lacks " + missing;
    return nullptr;
  }
  if (NvmlReturn rc = nvml->init(); rc != kNvmlSuccess) {
    why = "nvmlInit failed with code " + std::to_string(rc);
    return nullptr;
  }
  nvml->initialised = true;
  unsigned int count = 0;
  if (NvmlReturn rc = nvml->device_count(&count); rc != kNvmlSuccess) {
    why = "nvmlDeviceGetCount failed with code " + std::to_string(rc);
    return nullptr;
  }
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice d = nullptr;
    if (nvml->device_by_index(i, &d) != kNvmlSuccess) {
      why = "nvmlDeviceGetHandleByIndex failed for GPU " + std::to_string(i);
      return nullptr;
    }
    nvml->devices.push_back(d);
  }
  return std::unique_ptr<GpuMetrics>(new GpuMetrics(std::shared_ptr<Nvml>(std::move(nvml)), registry));
}

GpuMetrics::GpuMetrics(std::shared_ptr<Nvml> nvml, Registry& registry) : nvml_(std::move(nvml)) {
  Family<Gauge>& utilization =
      registry.gauge("anvil_gpu_utilization_ratio",
                     "Share of the last sample period (NVML) in which a kernel ran on the GPU.", {"gpu"});
  Family<Gauge>& used =
      registry.gauge("anvil_gpu_memory_used_bytes", "GPU memory in use by all processes (NVML).", {"gpu"});
  Family<Gauge>& total = registry.gauge("anvil_gpu_memory_total_bytes", "GPU memory installed (NVML).", {"gpu"});
  Family<Gauge>& info = registry.gauge("anvil_gpu_info", "The GPU's model name; the value is 1.", {"gpu", "name"});
  for (size_t i = 0; i < nvml_->devices.size(); ++i) {
    char name[96] = {0};
    if (nvml_->name(nvml_->devices[i], name, sizeof(name) - 1) == kNvmlSuccess)
      info.with({std::to_string(i), name}).Set(1);
  }
  registry.add_collector([nvml = nvml_, &utilization, &used, &total] {
    for (size_t i = 0; i < nvml->devices.size(); ++i) {
      const std::string gpu = std::to_string(i);
      // A failing read (a GPU fallen off the bus) leaves the last value rather than a false 0.
      NvmlUtilization u{};
      if (nvml->utilization(nvml->devices[i], &u) == kNvmlSuccess) utilization.with({gpu}).Set(u.gpu / 100.0);
      NvmlMemory m{};
      if (nvml->memory(nvml->devices[i], &m) == kNvmlSuccess) {
        used.with({gpu}).Set(static_cast<double>(m.used));
        total.with({gpu}).Set(static_cast<double>(m.total));
      }
    }
  });
}

GpuMetrics::~GpuMetrics() = default;

int GpuMetrics::device_count() const { return static_cast<int>(nvml_->devices.size()); }

GpuMetrics::UtilisationReader GpuMetrics::utilisation_reader() const {
  return [nvml = nvml_](const std::string& pci_bus_id) -> std::optional<double> {
    NvmlDevice device = nullptr;
    if (pci_bus_id.empty() || nvml->by_pci_bus_id == nullptr ||
        nvml->by_pci_bus_id(pci_bus_id.c_str(), &device) != kNvmlSuccess) {
      return std::nullopt;
    }
    NvmlUtilization u{};
    if (nvml->utilization(device, &u) != kNvmlSuccess) return std::nullopt;
    return u.gpu / 100.0;
  };
}

}  // namespace anvil::server::metrics
