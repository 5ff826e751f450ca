#include "core/backend/cuda/cuda_device_memory.h"

#include <cuda.h>

#include <memory>

#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"
#include "core/util/error.h"

namespace anvil::cuda {

// The driver's virtual-memory entry points, looked up once per provider.
struct CudaDeviceMemory::Driver {
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  CUmemAllocationProp prop{};
};

namespace {

template <typename Fn>
void Lookup(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ANVIL_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found));
  ANVIL_CHECK(found == cudaDriverEntryPointSuccess && p != nullptr, "the CUDA driver lacks ", symbol,
              " (expandable_segments needs a driver for CUDA 12 or newer)");
  fn = reinterpret_cast<Fn>(p);
}

void CheckDriver(CUresult r, const char* what) {
  ANVIL_CHECK(r == CUDA_SUCCESS, "CUDA driver call ", what, " failed with code ", static_cast<int>(r));
}

}  // namespace

CudaDeviceMemory::CudaDeviceMemory(int device) : device_(device) {
  DeviceGuard guard(device_);
  size_t free_bytes = 0;
  ANVIL_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_));
}

CudaDeviceMemory::~CudaDeviceMemory() { delete driver_; }

CudaDeviceMemory::Driver& CudaDeviceMemory::GetDriver() {
  if (driver_ != nullptr) return *driver_;
  auto d = std::make_unique<Driver>();
  Lookup("cuMemAddressReserve", d->address_reserve);
  Lookup("cuMemAddressFree", d->address_free);
  Lookup("cuMemCreate", d->create);
  Lookup("cuMemRelease", d->release);
  Lookup("cuMemMap", d->map);
  Lookup("cuMemUnmap", d->unmap);
  Lookup("cuMemSetAccess", d->set_access);
  Lookup("cuMemGetAllocationGranularity", d->granularity);
  d->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  d->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d->prop.location.id = device_;
  size_t g = 0;
  CheckDriver(d->granularity(&g, &d->prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity");
  // The allocator's page is 2 MiB (its rounding assumes it); any driver granularity that
  // divides it works.
  ANVIL_CHECK(g > 0 && (size_t{2} << 20) % g == 0, "unexpected CUDA allocation granularity ", g);
  driver_ = d.release();
  return *driver_;
}

void* CudaDeviceMemory::malloc(size_t bytes) {
  DeviceGuard guard(device_);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is expected here: the allocator retries
    return nullptr;
  }
  ANVIL_CUDA_CHECK(e);
  return p;
}

void CudaDeviceMemory::free(void* ptr) {
  DeviceGuard guard(device_);
  ANVIL_CUDA_CHECK(cudaFree(ptr));
}

void* CudaDeviceMemory::reserve_address(size_t bytes) {
  Driver& d = GetDriver();
  DeviceGuard guard(device_);  // the driver calls act on the current context
  CUdeviceptr base = 0;
  if (d.address_reserve(&base, bytes, 0, 0, 0) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<void*>(base);
}

void CudaDeviceMemory::release_address(void* base, size_t bytes) {
  CheckDriver(GetDriver().address_free(reinterpret_cast<CUdeviceptr>(base), bytes), "cuMemAddressFree");
}

bool CudaDeviceMemory::map(void* addr, size_t bytes) {
  Driver& d = GetDriver();
  DeviceGuard guard(device_);  // the driver calls act on the current context
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  // One physical allocation per page: the allocator later unmaps any page-aligned tail.
  for (size_t off = 0; off < bytes; off += granularity_) {
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = d.create(&h, granularity_, &d.prop, 0);
    if (r != CUDA_SUCCESS) {
      if (off > 0) unmap(addr, off);  // all or nothing
      if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
      CheckDriver(r, "cuMemCreate");
    }
    const CUdeviceptr page = static_cast<CUdeviceptr>(start + off);
    if (const CUresult m = d.map(page, granularity_, 0, h, 0); m != CUDA_SUCCESS) {
      d.release(h);
      if (off > 0) unmap(addr, off);
      CheckDriver(m, "cuMemMap");
    }
    page_handles_[start + off] = h;
  }
  CUmemAccessDesc access{};
  access.location = d.prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CheckDriver(d.set_access(static_cast<CUdeviceptr>(start), bytes, &access, 1), "cuMemSetAccess");
  return true;
}

void CudaDeviceMemory::unmap(void* addr, size_t bytes) {
  Driver& d = GetDriver();
  DeviceGuard guard(device_);
  ANVIL_CUDA_CHECK(cudaDeviceSynchronize());  // nothing may still use the pages
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  for (size_t off = 0; off < bytes; off += granularity_) {
    auto it = page_handles_.find(start + off);
    ANVIL_INTERNAL_ASSERT(it != page_handles_.end(), "unmap of a page that is not mapped");
    CheckDriver(d.unmap(static_cast<CUdeviceptr>(start + off), granularity_), "cuMemUnmap");
    CheckDriver(d.release(it->second), "cuMemRelease");
    page_handles_.erase(it);
  }
}

EventId CudaDeviceMemory::record_event(StreamId stream) {
  DeviceGuard guard(device_);
  return cuda::record_event(stream);
}

bool CudaDeviceMemory::query_event(EventId event) { return event_completed(event); }

void CudaDeviceMemory::synchronize_event(EventId event) {
  ANVIL_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
}

void CudaDeviceMemory::destroy_event(EventId event) { cuda::destroy_event(event); }

}  // namespace anvil::cuda
