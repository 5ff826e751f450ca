#include "core/backend/device_info.h"

#include "core/backend/registry.h"

#ifndef ANVIL_WITH_CUDA
#define ANVIL_WITH_CUDA 0
#endif
#if ANVIL_WITH_CUDA
#include <cuda_runtime.h>

#include "core/backend/cuda/backend.h"
#endif

namespace anvil {

void reset_peak_memory(Device device) {
#if ANVIL_WITH_CUDA
  if (device.is_cuda()) cuda::reset_peak(device.index);
#else
  (void)device;
#endif
}

std::string cuda_pci_bus_id(int device) {
#if ANVIL_WITH_CUDA
  if (device < 0 || device >= cuda_device_count()) return "";
  char id[32] = {0};
  if (cudaDeviceGetPCIBusId(id, sizeof(id) - 1, device) != cudaSuccess) return "";
  return id;
#else
  (void)device;
  return "";
#endif
}

}  // namespace anvil
