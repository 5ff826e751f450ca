// Backends: for each device type, an allocator and a kernel table indexed by OpId.
// Tables are filled by explicit calls (RegisterCpuKernels, RegisterCudaKernels) when a
// backend is first used — no static-initialiser registration, so what is linked is what
// runs, in a known order.
//
// Thread-safety: the free functions are safe from any thread; a Backend is built once and its
// kernel table only read after, its allocators are thread-safe. A DeviceStreamScope belongs to
// the thread that made it.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/ops/attrs.h"
#include "core/ops/op_table.h"
#include "core/tensor/allocator.h"
#include "core/tensor/tensor.h"

namespace anvil {

// One kernel invocation. Outputs are allocated by the dispatcher from the op's inferred
// specs (Dynamic rows allocate their own); inputs already share one dtype where the row's
// inference says so.
struct KernelCall {
  OpId op;
  const std::vector<Tensor>& inputs;
  std::vector<Tensor>& outputs;
  const OpAttrs& attrs;
};
using KernelFn = void (*)(const KernelCall&);
using KernelTable = std::array<KernelFn, kNumOps>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual Allocator* allocator(Device device) = 0;
  // Copies raw bytes between this backend's memory and the host (or within the device).
  // non_blocking: see Tensor::to.
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                          bool non_blocking) = 0;
  virtual int device_count() const = 0;
  KernelFn kernel(OpId op) const { return kernels_[static_cast<int>(op)]; }

 protected:
  KernelTable kernels_{};
};

// The backend that owns `device`'s memory. Throws if that backend is not built or the
// device does not exist.
Backend& backend_for(Device device);
bool cuda_is_available();
int cuda_device_count();
// Whether this build has the CUDA backend at all (it may still find no device at run time).
bool cuda_is_built();
// Why cuda_device_count() is 0: no backend in this build, no driver, no device; "" if it is not.
std::string cuda_unavailable_reason();

// For a thread that owns a device (a service worker): gives the thread a stream of its own on
// `device` until destroyed, so its work overlaps with other threads' and is ordered within
// itself; at destruction the stream's work is finished first. Nothing on the CPU.
class DeviceStreamScope {
 public:
  explicit DeviceStreamScope(Device device);
  ~DeviceStreamScope();
  DeviceStreamScope(const DeviceStreamScope&) = delete;
  DeviceStreamScope& operator=(const DeviceStreamScope&) = delete;

 private:
  struct Impl;
  Impl* impl_ = nullptr;
};

// The allocator of page-locked host memory (Tensor::pin_memory); null without a usable CUDA
// device.
Allocator* pinned_memory_allocator();

// Waits for all work queued on `device` by the calling thread (nothing on the CPU).
void synchronize(Device device);

void RegisterCpuKernels(KernelTable& table);

}  // namespace anvil
