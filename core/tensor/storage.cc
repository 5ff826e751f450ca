#include "core/tensor/storage.h"

#include "core/backend/registry.h"
#include "core/util/error.h"

namespace anvil {

StorageImpl::StorageImpl(size_t nbytes, Allocator* allocator)
    : nbytes_(nbytes), device_(allocator->device()), allocator_(allocator), budget_(current_memory_budget()) {
  // Charged before the bytes are asked for: a request beyond its budget touches no memory.
  if (budget_) budget_->charge(static_cast<int64_t>(nbytes));
  try {
    data_ = allocator->allocate(nbytes);
  } catch (...) {
    if (budget_) budget_->release(static_cast<int64_t>(nbytes));
    throw;
  }
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), allocator_(nullptr), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (budget_) budget_->release(static_cast<int64_t>(nbytes_));
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

Storage make_storage(size_t nbytes, Device device) {
  return std::make_shared<StorageImpl>(nbytes, backend_for(device).allocator(device));
}

}  // namespace anvil
