#include "core/tensor/storage.h"

#include "core/backend/registry.h"
#include "core/util/error.h"

namespace anvil {

StorageImpl::StorageImpl(size_t nbytes, Allocator* allocator)
    : data_(allocator->allocate(nbytes)), nbytes_(nbytes), device_(allocator->device()), allocator_(allocator) {}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), allocator_(nullptr), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
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
