#include "core/util/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "core/util/cpu_features.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil {
namespace {

thread_local bool t_in_region = false;
thread_local bool t_serial = false;  // a SerialGuard is alive on this thread

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~ThreadPool() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Runs chunk_fn(0..n-1); returns when all are done.
  void Run(int64_t n, const std::function<void(int64_t)>& fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu) {
    uint64_t gen = 0;
    {
      MutexLock lock(&mu_);
      fn_ = &fn;
      num_chunks_.store(n, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      error_ = nullptr;
      gen = ++generation_;
      // Chunk 0 is the caller's (below); workers take the rest.
      next_.store(Tagged(gen, 1), std::memory_order_relaxed);
      published_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    // The caller always runs chunk 0, so consecutive kernels split alike keep their halves on
    // the same cores: a GEMM's first rows and the element-wise op that reads them next stay
    // in the caller's cache instead of crossing to the other core's.
    t_in_region = true;
    if (n > 0) RunChunk(fn, n, 0);
    Work(gen, fn, n);
    // Spin briefly, then sleep: most chunks finish within microseconds of each other.
    for (int spin = 0; done_.load(std::memory_order_acquire) < num_chunks_; ++spin) {
      if (spin > 2000) {
        UniqueMutexLock lock(&mu_);
        while (done_.load(std::memory_order_acquire) < num_chunks_) done_cv_.wait(lock.native());
        break;
      }
      std::this_thread::yield();
    }
    std::exception_ptr err;
    {
      MutexLock lock(&mu_);
      fn_ = nullptr;
      err = error_;
    }
    if (err) std::rethrow_exception(err);
  }

  // One parallel region at a time. It guards no data (a region's state is mu_'s): it only
  // keeps a second caller out of Run while one runs.
  Mutex run_mu;

 private:
  // The next chunk index, tagged with its region's generation (low 32 bits of each): a worker
  // still leaving region G cannot claim a chunk of region G + 1 with G's function (found by
  // ThreadSanitizer when a job's kernels and a served model's ran at once: the worker read
  // fn_ and the chunk counters of a region it had not been woken for).
  static uint64_t Tagged(uint64_t gen, int64_t index) {
    return (gen << 32) | static_cast<uint64_t>(index & 0xffffffff);
  }

  void RunChunk(const std::function<void(int64_t)>& fn, int64_t n, int64_t c) {
    try {
      fn(c);
    } catch (...) {
      MutexLock lock(&mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
      MutexLock lock(&mu_);
      done_cv_.notify_all();
    }
  }

  // Claims and runs chunks of region `gen` (whose function and size the caller passes) until
  // none is left or another region has begun.
  void Work(uint64_t gen, const std::function<void(int64_t)>& fn, int64_t n) {
    t_in_region = true;
    uint64_t v = next_.load(std::memory_order_acquire);
    while (true) {
      if ((v >> 32) != (gen & 0xffffffff)) break;
      const int64_t c = static_cast<int64_t>(v & 0xffffffff);
      if (c >= n) break;
      if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      RunChunk(fn, n, c);
      v = next_.load(std::memory_order_acquire);
    }
    t_in_region = false;
  }

  void WorkerLoop() {
    uint64_t seen = 0;
    while (true) {
      // Spin briefly before sleeping: kernels arrive back to back during training, and a
      // futex wake-up costs tens of microseconds, more than many kernels take. The spin
      // yields every kYieldEvery pauses, so a runnable thread on this core (a DataLoader
      // worker on a 2-core machine) runs instead of waiting out the spin: with a plain
      // spin, splitting small products cost the digits MLP preset 35 % end to end; with
      // the yield the same splits made it faster (0.31-0.33 s -> 0.26-0.30 s).
      for (int spin = 0; spin < kSpinIterations; ++spin) {
        if (published_.load(std::memory_order_acquire) != seen) break;
        if (spin % kYieldEvery == kYieldEvery - 1) {
          std::this_thread::yield();
        } else {
          CpuRelax();
        }
      }
      const std::function<void(int64_t)>* fn = nullptr;
      int64_t n = 0;
      {
        UniqueMutexLock lock(&mu_);
        while (!stop_ && !(generation_ != seen && fn_ != nullptr)) cv_.wait(lock.native());
        if (stop_) return;
        seen = generation_;
        fn = fn_;  // this region's, read under the lock; valid until its last chunk is done
        n = num_chunks_.load(std::memory_order_relaxed);
      }
      Work(seen, *fn, n);
    }
  }

  static void CpuRelax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
  // ~100 µs (a pause is ~25 ns on the target CPUs): covers back-to-back kernels without
  // holding a core long when other threads (data loading) need it.
  static constexpr int kSpinIterations = 4000;
  static constexpr int kYieldEvery = 64;  // ~1.5 µs of pauses between yields

  const int threads_;
  std::vector<std::thread> workers_;
  Mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  // Written before notify, read by workers after wake-up.
  const std::function<void(int64_t)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<int64_t> num_chunks_{0};  // written under mu_; read by the caller's spin without it
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::exception_ptr error_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> published_{0};  // generation_, readable without the lock
  std::atomic<uint64_t> next_{0};       // Tagged(generation, next chunk index)
  std::atomic<int64_t> done_{0};
};

int DefaultThreads() {
  if (const char* env = std::getenv("ANVIL_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  // The CPUs this process may run on (its affinity, a container's quota), not the machine's:
  // a pool wider than that only time-slices.
  return available_cpu_threads();
}

Mutex g_pool_mu;
std::shared_ptr<ThreadPool> g_pool ABSL_GUARDED_BY(g_pool_mu);
std::atomic<int> g_threads{0};

std::shared_ptr<ThreadPool> Pool() {
  MutexLock lock(&g_pool_mu);
  if (!g_pool) {
    int n = g_threads.load();
    if (n <= 0) n = DefaultThreads();
    g_threads = n;
    g_pool = std::make_shared<ThreadPool>(n);
  }
  return g_pool;
}

}  // namespace

int get_num_threads() {
  int n = g_threads.load();
  if (n > 0) return n;
  return Pool()->threads();
}

void set_num_threads(int n) {
  ANVIL_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
  MutexLock lock(&g_pool_mu);
  if (g_pool && g_pool->threads() == n) return;
  g_pool.reset();  // joins the old workers once no region holds it
  g_threads = n;
}

bool in_parallel_region() { return t_in_region; }

SerialGuard::SerialGuard() : previous_(t_serial) { t_serial = true; }
SerialGuard::~SerialGuard() { t_serial = previous_; }

namespace detail {
bool serial_forced() { return t_serial; }

void RunParallel(int64_t num_chunks, const std::function<void(int64_t)>& chunk_fn) {
  auto pool = Pool();
  if (!pool->run_mu.try_lock()) {  // busy: another thread's region, or a nested call
    for (int64_t c = 0; c < num_chunks; ++c) chunk_fn(c);
    return;
  }
  MutexLock lock(&pool->run_mu, std::adopt_lock);
  if (pool->threads() <= 1) {
    for (int64_t c = 0; c < num_chunks; ++c) chunk_fn(c);
    return;
  }
  pool->Run(num_chunks, chunk_fn);
}
}  // namespace detail

}  // namespace anvil
