// GPU utilisation and memory from NVML, loaded at run time with dlopen: anvild has no build-
// or install-time dependency on the NVIDIA driver, and the same binary runs on machines with
// and without GPUs.
//
// When the library cannot be loaded, lacks a symbol, or nvmlInit fails, the GPU families are
// not registered at all — absent, not zero — so a dashboard shows "no data" instead of an
// idle GPU. Values are read at scrape time (a collector), one NVML call per device and value.
//
// Thread-safety: the collector runs under the registry's render; utilisation_reader's reads
// may come from any thread (NVML's calls are thread-safe).
// The library stays loaded until both this object and the registry are gone.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/metrics/registry.h"

namespace anvil::server::metrics {

// The driver's library name; ANVIL_NVML_LIBRARY overrides it (a path; tests load a fake).
std::string default_nvml_library();

class GpuMetrics {
 public:
  // Null when NVML is unavailable (the reason is in `why_not` when given).
  static std::unique_ptr<GpuMetrics> Open(Registry& registry, const std::string& library,
                                          std::string* why_not = nullptr);
  ~GpuMetrics();
  GpuMetrics(const GpuMetrics&) = delete;
  GpuMetrics& operator=(const GpuMetrics&) = delete;

  int device_count() const;

  // Reads a GPU's utilisation now (NVML's share of its last sample period in which a kernel
  // ran), for the training doctor's per-job LOW_DEVICE_UTILISATION. The GPU is found by its
  // PCI bus id (cuda_pci_bus_id): NVML orders GPUs by bus, CUDA may not, so an index would be
  // a guess. nullopt for an empty or unknown id, an NVML without the lookup, or a failed read:
  // no value rather than another GPU's. The reader keeps the library loaded; NVML's calls are
  // thread-safe, so any thread may call it.
  using UtilisationReader = std::function<std::optional<double>(const std::string& pci_bus_id)>;
  UtilisationReader utilisation_reader() const;

 private:
  struct Nvml;
  GpuMetrics(std::shared_ptr<Nvml> nvml, Registry& registry);

  // Shared with the registry's collector, so a render after this object is gone stays safe.
  std::shared_ptr<Nvml> nvml_;
};

}  // namespace anvil::server::metrics
