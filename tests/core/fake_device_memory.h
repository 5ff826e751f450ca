// FakeDeviceMemory: a DeviceMemoryProvider over a made-up address space, so the CUDA
// caching allocator is tested on machines without a GPU. Addresses come from a counter and
// are never dereferenced; a capacity stands in for the device's memory. Every call is
// counted, and misuse a real driver would reject (freeing what was not allocated, mapping a
// page twice, releasing a range with pages still mapped) fails the running test.
//
// Streams are modelled by one counter each: record_event() numbers the stream's events,
// finish_stream() marks every event recorded so far as complete, and synchronize_event()
// completes the stream up to that event, as blocking on it would.
// Thread-safety: none of its own; the allocator calls it under its mutex.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/backend/cuda/device_memory.h"

namespace anvil::test {

class FakeDeviceMemory : public cuda::DeviceMemoryProvider {
 public:
  static constexpr size_t kPage = size_t{2} << 20;

  explicit FakeDeviceMemory(size_t capacity) : capacity_(capacity) {}
  ~FakeDeviceMemory() override {
    EXPECT_TRUE(live_.empty()) << "segments never freed";
    EXPECT_TRUE(mapped_.empty()) << "pages never unmapped";
    EXPECT_TRUE(reservations_.empty()) << "address ranges never released";
    EXPECT_TRUE(events_.empty()) << "events never destroyed";
  }

  void* malloc(size_t bytes) override {
    if (used_ + bytes > capacity_) {
      ++failed_mallocs;
      return nullptr;
    }
    const uintptr_t addr = Take(bytes);
    live_[addr] = bytes;
    used_ += bytes;
    malloc_sizes.push_back(bytes);
    return reinterpret_cast<void*>(addr);
  }
  void free(void* ptr) override {
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == live_.end()) {
      ADD_FAILURE() << "free of " << ptr << " which malloc did not return";
      return;
    }
    used_ -= it->second;
    live_.erase(it);
    ++frees;
  }

  size_t granularity() const override { return kPage; }
  void* reserve_address(size_t bytes) override {
    EXPECT_EQ(bytes % kPage, 0u);
    ++reserves;
    const uintptr_t addr = Take(bytes);
    reservations_[addr] = bytes;
    return reinterpret_cast<void*>(addr);
  }
  void release_address(void* base, size_t bytes) override {
    const uintptr_t b = reinterpret_cast<uintptr_t>(base);
    auto it = reservations_.find(b);
    if (it == reservations_.end() || it->second != bytes) {
      ADD_FAILURE() << "release_address of a range reserve_address did not return";
      return;
    }
    auto page = mapped_.lower_bound(b);
    EXPECT_TRUE(page == mapped_.end() || *page >= b + bytes) << "released with pages mapped";
    reservations_.erase(it);
    ++releases;
  }
  bool map(void* addr, size_t bytes) override {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    EXPECT_EQ(a % kPage, 0u);
    EXPECT_EQ(bytes % kPage, 0u);
    EXPECT_TRUE(InReservation(a, bytes)) << "map outside a reserved range";
    if (used_ + bytes > capacity_) {
      ++failed_maps;
      return false;
    }
    for (uintptr_t p = a; p < a + bytes; p += kPage) {
      EXPECT_TRUE(mapped_.insert(p).second) << "page mapped twice";
    }
    used_ += bytes;
    map_sizes.push_back(bytes);
    return true;
  }
  void unmap(void* addr, size_t bytes) override {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    EXPECT_EQ(a % kPage, 0u);
    EXPECT_EQ(bytes % kPage, 0u);
    for (uintptr_t p = a; p < a + bytes; p += kPage) {
      EXPECT_EQ(mapped_.erase(p), 1u) << "unmap of a page that is not mapped";
    }
    used_ -= bytes;
    ++unmaps;
  }

  cuda::EventId record_event(cuda::StreamId stream) override {
    const cuda::EventId id = next_event_++;
    events_[id] = {stream, ++recorded_[stream]};
    return id;
  }
  bool query_event(cuda::EventId event) override {
    auto it = events_.find(event);
    if (it == events_.end()) {
      ADD_FAILURE() << "query of an unknown event";
      return true;
    }
    return completed_[it->second.stream] >= it->second.seq;
  }
  void synchronize_event(cuda::EventId event) override {
    ++synchronizes;
    auto it = events_.find(event);
    if (it == events_.end()) {
      ADD_FAILURE() << "synchronize of an unknown event";
      return;
    }
    uint64_t& done = completed_[it->second.stream];
    done = std::max(done, it->second.seq);
  }
  void destroy_event(cuda::EventId event) override { EXPECT_EQ(events_.erase(event), 1u) << "event destroyed twice"; }

  size_t total_bytes() const override { return capacity_; }

  // Completes all work queued on `stream` so far.
  void finish_stream(cuda::StreamId stream) { completed_[stream] = recorded_[stream]; }
  // Bytes currently malloc'ed or mapped.
  size_t used() const { return used_; }
  size_t live_events() const { return events_.size(); }

  // Successful calls (sizes) and failures, for the tests to check.
  std::vector<size_t> malloc_sizes;
  std::vector<size_t> map_sizes;
  int failed_mallocs = 0;
  int failed_maps = 0;
  int frees = 0;
  int unmaps = 0;
  int reserves = 0;
  int releases = 0;
  int synchronizes = 0;

 private:
  struct Event {
    cuda::StreamId stream;
    uint64_t seq;
  };

  // A fresh page-aligned range, with a page-sized gap after it so that separate ranges are
  // never adjacent (adjacency would let a merge across segments go unnoticed).
  uintptr_t Take(size_t bytes) {
    const uintptr_t addr = next_addr_;
    next_addr_ += (bytes + kPage - 1) / kPage * kPage + kPage;
    return addr;
  }
  bool InReservation(uintptr_t a, size_t bytes) const {
    auto it = reservations_.upper_bound(a);
    if (it == reservations_.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
  }

  size_t capacity_;
  size_t used_ = 0;
  uintptr_t next_addr_ = uintptr_t{1} << 44;
  std::map<uintptr_t, size_t> live_;          // malloc'ed: base -> bytes
  std::map<uintptr_t, size_t> reservations_;  // reserved: base -> bytes
  std::set<uintptr_t> mapped_;                // mapped pages
  std::map<cuda::EventId, Event> events_;
  std::map<cuda::StreamId, uint64_t> recorded_;   // events recorded per stream
  std::map<cuda::StreamId, uint64_t> completed_;  // events completed per stream
  cuda::EventId next_event_ = 1;
};

}  // namespace anvil::test
