// The engine's intra-op thread pool. One process-wide pool of (threads - 1) workers; the
// calling thread always takes part. Work is split into a fixed number of chunks that
// depends only on the range and the thread count, never on timing, so reductions combine
// partial results in the same order every run (bitwise-repeatable CPU training).
//
// Thread-safety: any thread may call ParallelFor. Only one parallel region runs at a time;
// a caller that finds the pool busy (another thread's region, or a nested call from inside
// a region) runs its work inline, so the two cores are never oversubscribed.
#pragma once

#include <cstdint>
#include <functional>

namespace anvil {

// Threads used by kernels (including the caller). Defaults to ANVIL_NUM_THREADS or the
// number of CPUs this process may run on (available_cpu_threads: its affinity mask and
// cgroup quota, not the machine's core count).
int get_num_threads();
void set_num_threads(int n);

// True inside a ParallelFor body.
bool in_parallel_region();

// While a SerialGuard lives, kernels called on this thread run all their chunks on this
// thread, never waking the pool. The chunking is the same as with the pool, so results are
// bitwise the same. DataLoader workers hold one: a loader thread must not take the pool away
// from the training thread, and a sample must come out the same whichever thread built it.
class SerialGuard {
 public:
  SerialGuard();
  ~SerialGuard();
  SerialGuard(const SerialGuard&) = delete;
  SerialGuard& operator=(const SerialGuard&) = delete;

 private:
  bool previous_;
};

namespace detail {
void RunParallel(int64_t num_chunks, const std::function<void(int64_t)>& chunk_fn);
bool serial_forced();
}  // namespace detail

// Calls f(chunk_begin, chunk_end) over [begin, end). Ranges shorter than `grain` (or a pool
// of one thread) run inline on the caller.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int threads = get_num_threads();
  if (threads <= 1 || n <= grain) {
    f(begin, end);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  const int64_t step = (n + chunks - 1) / chunks;
  chunks = (n + step - 1) / step;
  auto chunk = [&](int64_t c) {
    const int64_t b = begin + c * step;
    const int64_t e = std::min(end, b + step);
    if (b < e) f(b, e);
  };
  // Nested or serial-forced calls still walk the same chunks, so a reduction combines its
  // partial results identically whichever thread runs it.
  if (in_parallel_region() || detail::serial_forced()) {
    for (int64_t c = 0; c < chunks; ++c) chunk(c);
    return;
  }
  detail::RunParallel(chunks, chunk);
}

}  // namespace anvil
