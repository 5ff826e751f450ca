#include "core/backend/cuda/backend.h"

#include <array>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/cuda_device_memory.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/pinned_memory.h"
#include "core/backend/cuda/runtime.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::cuda {
namespace {

CachingAllocator::Options OptionsFromEnv() {
  const char* conf = std::getenv("ANVIL_CUDA_ALLOC_CONF");
  if (conf == nullptr) return {};
  try {
    return CachingAllocator::parse_options(conf);
  } catch (const std::invalid_argument& e) {
    throw Error(detail::StrCat("ANVIL_CUDA_ALLOC_CONF: ", e.what()));
  }
}

// anvil::Allocator over the caching allocator: Storage allocates on the thread's current
// stream of the device, so memory is reused in stream order without synchronisation.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device)
      : device_(device), provider_(device), cache_(&provider_, OptionsFromEnv(), device) {}

  void* allocate(size_t nbytes) override {
    DeviceGuard guard(device_);
    return cache_.allocate(nbytes, reinterpret_cast<StreamId>(current_stream(device_)));
  }
  void deallocate(void* ptr, size_t) override { cache_.deallocate(ptr); }
  Device device() const override { return CUDA(device_); }
  AllocatorStats stats() const override {
    const CachingAllocator::Stats s = cache_.stats();
    AllocatorStats out;
    out.allocated_bytes = s.allocated_bytes;
    out.cached_bytes = s.reserved_bytes - s.allocated_bytes;
    out.peak_allocated_bytes = s.peak_allocated_bytes;
    out.num_system_allocs = s.num_device_mallocs;
    out.active_blocks = s.active_blocks;
    out.largest_free_block = s.largest_free_block;
    out.fragmentation = s.fragmentation;
    out.num_ooms = s.num_ooms;
    return out;
  }
  void empty_cache() override { cache_.empty_cache(); }
  CachingAllocator& cache() { return cache_; }

 private:
  const int device_;
  CudaDeviceMemory provider_;
  CachingAllocator cache_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() { kernels_ = kernel_table(); }
  DeviceType type() const override { return DeviceType::CUDA; }
  Allocator* allocator(Device device) override { return &GetAllocator(device.index); }
  int device_count() const override { return cuda::device_count(); }

  // Host-to-device copies are queued without waiting for the GPU, and the caller may write the
  // source at once unless it asked for a non-blocking copy of a pinned source (NOTE [ Pinned
  // staging ]); device-to-host copies wait, because the host reads next.
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                  bool non_blocking) override {
    if (nbytes == 0) return;
    if (dst_device.is_cuda() && src_device.is_cuda()) {
      DeviceGuard guard(dst_device.index);
      cudaStream_t s = current_stream(dst_device.index);
      if (dst_device.index == src_device.index) {
        ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s));
      } else {
        // The source's queued work must finish before the peer copy reads it.
        synchronize_stream(src_device.index);
        ANVIL_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, s));
        // The source goes back to its own device's stream-ordered cache, which knows nothing of
        // this stream: wait here so that no later work on the source device reuses it mid-copy.
        wait_for_stream(s);
      }
    } else if (dst_device.is_cuda()) {
      copy_host_to_device(dst, dst_device.index, src, nbytes, non_blocking);  // NOTE [ Pinned staging ]
    } else {
      DeviceGuard guard(src_device.index);
      cudaStream_t s = current_stream(src_device.index);
      ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
      wait_for_stream(s);
    }
  }

  CudaAllocator& GetAllocator(int device) {
    ANVIL_CHECK(device >= 0 && device < cuda::device_count(), "cuda:", device, " does not exist (",
                cuda::device_count(), " CUDA device(s))");
    MutexLock lock(&mu_);
    auto& a = allocators_[static_cast<size_t>(device)];
    if (!a) a = std::make_unique<CudaAllocator>(device);
    return *a;
  }

 private:
  Mutex mu_;
  std::array<std::unique_ptr<CudaAllocator>, 64> allocators_ ABSL_GUARDED_BY(mu_);  // made on first use
};

CudaBackend& Instance() {
  ANVIL_CHECK(device_count() > 0, "CUDA is not available: ", unavailable_reason());
  static CudaBackend* instance = new CudaBackend();  // leaked: outlives static tensors
  return *instance;
}

}  // namespace

Backend& backend() { return Instance(); }

const KernelTable& kernel_table() {
  static const KernelTable table = MakeKernelTable();
  return table;
}

CachingAllocator::Stats memory_stats(int device) { return Instance().GetAllocator(device).cache().stats(); }

void empty_cache(int device) { Instance().GetAllocator(device).cache().empty_cache(); }

void reset_peak(int device) { Instance().GetAllocator(device).cache().reset_peak(); }

}  // namespace anvil::cuda
