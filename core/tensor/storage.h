// Storage: one reference-counted block of memory that any number of tensor views share.
//
// NOTE [ Version counter ]
// The storage carries the version counter that autograd uses to detect in-place changes to
// saved tensors. Every view and every detach() of a tensor shares its storage and so its
// counter: writing through any alias is seen by all. Each in-place op bumps the counter and
// records its own name, so the error at backward can say which op modified the tensor.
//
// Thread-safety: the counter is atomic; the bytes themselves are not synchronised.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor/allocator.h"
#include "core/tensor/device.h"
#include "core/tensor/memory_budget.h"

namespace anvil {

class StorageImpl {
 public:
  // Allocates `nbytes` from `allocator` (borrowed; must outlive the storage).
  StorageImpl(size_t nbytes, Allocator* allocator);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // The allocator the bytes came from; null for wrapped external memory.
  Allocator* allocator() const { return allocator_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  // Records an in-place write by `op` (a string literal).
  void bump_version(const char* op) {
    last_writer_.store(op, std::memory_order_relaxed);
    version_.fetch_add(1, std::memory_order_relaxed);
  }
  const char* last_writer() const { return last_writer_.load(std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_;
  Device device_;
  Allocator* allocator_;                  // null when wrapping external memory
  std::shared_ptr<MemoryBudget> budget_;  // charged with nbytes_ (core/tensor/memory_budget.h); may be null
  std::function<void(void*)> deleter_;    // for external memory
  std::atomic<uint64_t> version_{0};
  std::atomic<const char*> last_writer_{nullptr};
};

using Storage = std::shared_ptr<StorageImpl>;

// Allocates a storage on `device`.
Storage make_storage(size_t nbytes, Device device);

}  // namespace anvil
