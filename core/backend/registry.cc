#include "core/backend/registry.h"

#include <cstring>

#include "core/util/error.h"

namespace anvil {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() { RegisterCpuKernels(kernels_); }
  DeviceType type() const override { return DeviceType::CPU; }
  Allocator* allocator(Device) override { return cpu_allocator(); }
  void copy_bytes(void* dst, Device, const void* src, Device, size_t nbytes) override {
    std::memcpy(dst, src, nbytes);
  }
  int device_count() const override { return 1; }
};

}  // namespace

Backend& backend_for(Device device) {
  static CpuBackend* cpu = new CpuBackend();  // leaked: outlives static tensors
  if (device.is_cpu()) return *cpu;
  throw NotImplementedError(detail::StrCat(
      "device ", device, " is not available: this build of Anvil has no CUDA backend "
      "(or no CUDA device was found)"));
}

bool cuda_is_available() { return false; }
int cuda_device_count() { return 0; }

}  // namespace anvil
