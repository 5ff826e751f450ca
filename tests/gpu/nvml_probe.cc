// The GPU families of a metrics scrape, read through NVML the way anvild reads them: prints
// the anvil_gpu_* series of one rendering of the registry. Exit 1 when NVML is unavailable.
// Part of tests/gpu/check.sh.
#include <cstdio>
#include <sstream>
#include <string>

#include "server/metrics/gpu_metrics.h"

int main() {
  using namespace anvil::server::metrics;
  Registry registry;
  std::string why;
  std::unique_ptr<GpuMetrics> gpu = GpuMetrics::Open(registry, default_nvml_library(), &why);
  if (!gpu) {
    std::printf("NVML unavailable: %s\n", why.c_str());
    return 1;
  }
  std::istringstream text(registry.render());
  int series = 0;
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("anvil_gpu_", 0) == 0) {
      std::printf("%s\n", line.c_str());
      ++series;
    }
  }
  std::printf("%d GPU(s), %d series\n", gpu->device_count(), series);
  return series > 0 ? 0 : 1;
}
