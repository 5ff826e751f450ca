// Elements that end (or start) exactly at an inaccessible page, as a tensor at the end (or the
// start) of a mapping does: a kernel that reads one element past its operand faults here at
// once, instead of reading a neighbour's bytes unseen (or only under one sanitizer's heap
// layout).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

namespace anvil::test {

template <typename T>
class GuardedBuffer {
 public:
  // guard_after: the page after the last element is inaccessible; otherwise the page before
  // the first one.
  GuardedBuffer(size_t count, bool guard_after) : count_(count) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (count * sizeof(T) + page - 1) / page;
    size_ = (data_pages + 1) * page;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("GuardedBuffer: mmap failed");
    base_ = static_cast<char*>(p);
    char* guard = guard_after ? base_ + data_pages * page : base_;
    if (mprotect(guard, page, PROT_NONE) != 0) {
      munmap(base_, size_);
      throw std::runtime_error("GuardedBuffer: mprotect failed");
    }
    data_ = guard_after ? reinterpret_cast<T*>(guard) - count : reinterpret_cast<T*>(base_ + page);
  }
  GuardedBuffer(const std::vector<T>& values, bool guard_after) : GuardedBuffer(values.size(), guard_after) {
    for (size_t i = 0; i < count_; ++i) data_[i] = values[i];
  }
  ~GuardedBuffer() { munmap(base_, size_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  size_t size() const { return count_; }
  std::vector<T> to_vector() const { return std::vector<T>(data_, data_ + count_); }

 private:
  size_t count_, size_ = 0;
  char* base_ = nullptr;
  T* data_ = nullptr;
};

}  // namespace anvil::test
