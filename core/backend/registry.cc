#include "core/backend/registry.h"

#include <cstring>

#include "core/backend/cpu/kernel_info.h"
#include "core/util/error.h"

#ifndef ANVIL_WITH_CUDA
#define ANVIL_WITH_CUDA 0
#endif
#if ANVIL_WITH_CUDA
#include "core/backend/cuda/backend.h"
#include "core/backend/cuda/pinned_memory.h"
#include "core/backend/cuda/runtime.h"
#endif

namespace anvil {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    RegisterCpuKernels(kernels_);
    log_cpu_kernel_summary_once();
  }
  DeviceType type() const override { return DeviceType::CPU; }
  Allocator* allocator(Device) override { return cpu_allocator(); }
  void copy_bytes(void* dst, Device, const void* src, Device, size_t nbytes, bool) override {
    std::memcpy(dst, src, nbytes);
  }
  int device_count() const override { return 1; }
};

}  // namespace

Backend& backend_for(Device device) {
  static CpuBackend* cpu = new CpuBackend();  // leaked: outlives static tensors
  if (device.is_cpu()) return *cpu;
  if (cuda_device_count() == 0) {
    throw NotImplementedError(detail::StrCat("device ", device, " is not available: ", cuda_unavailable_reason()));
  }
#if ANVIL_WITH_CUDA
  ANVIL_CHECK(device.index >= 0 && device.index < cuda_device_count(), "device ", device, " does not exist (",
              cuda_device_count(), " CUDA device(s))");
  return cuda::backend();
#else
  throw NotImplementedError("unreachable: CUDA devices without a CUDA backend");
#endif
}

bool cuda_is_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
#if ANVIL_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

#if ANVIL_WITH_CUDA
struct DeviceStreamScope::Impl {
  int device;
  cudaStream_t stream;
  cuda::StreamGuard guard;
  Impl(int d, cudaStream_t s) : device(d), stream(s), guard(d, s) {}
};
#else
struct DeviceStreamScope::Impl {};
#endif

DeviceStreamScope::DeviceStreamScope(Device device) {
#if ANVIL_WITH_CUDA
  if (device.is_cuda()) {
    backend_for(device);  // a clear error for a missing device
    impl_ = new Impl(device.index, cuda::create_stream(device.index));
  }
#else
  (void)device;
#endif
}

DeviceStreamScope::~DeviceStreamScope() {
#if ANVIL_WITH_CUDA
  if (impl_ != nullptr) {
    cuda::DeviceGuard guard(impl_->device);
    (void)cudaStreamSynchronize(impl_->stream);
    const cudaStream_t stream = impl_->stream;
    delete impl_;  // restores the previous current stream
    (void)cudaStreamDestroy(stream);
  }
#endif
}

void synchronize(Device device) {
#if ANVIL_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize_stream(device.index);
#else
  (void)device;
#endif
}

Allocator* pinned_memory_allocator() {
#if ANVIL_WITH_CUDA
  if (cuda_is_available()) return cuda::pinned_allocator();
#endif
  return nullptr;
}

bool cuda_is_built() { return ANVIL_WITH_CUDA != 0; }

std::string cuda_unavailable_reason() {
#if ANVIL_WITH_CUDA
  return cuda::unavailable_reason();
#else
  return "this build of Anvil has no CUDA backend (nvcc was not found when it was configured)";
#endif
}

}  // namespace anvil
