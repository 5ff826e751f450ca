#include "server/heavy_work.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "core/util/fault_point.h"
#include "core/util/mutex.h"
#include "server/status.h"
#include "server/unary_call.h"

namespace anvil::server {

void heavy_work_fault_point() {
  if (fault_point_fires("heavy_work:slow")) std::this_thread::sleep_for(std::chrono::seconds(1));
}

namespace {
// How both kinds of abandoned work begin their CANCELLED message.
constexpr const char* kCallEnded = "the call ended (its deadline passed, or the client cancelled)";
std::atomic<int64_t> abandoned_queued{0};
std::atomic<int64_t> abandoned_running{0};
}  // namespace

absl::Status heavy_work_abandoned() {
  abandoned_queued.fetch_add(1, std::memory_order_relaxed);
  return absl::CancelledError(std::string(kCallEnded) + " while its work waited");
}

void stop_if_abandoned(const grpc::ServerContextBase& ctx, std::string_view call, std::string_view done) {
  if (!ctx.IsCancelled()) return;
  abandoned_running.fetch_add(1, std::memory_order_relaxed);
  std::string message = kCallEnded;
  message.append(" during its ").append(call).append(": stopped after ").append(done);
  throw ServiceError(absl::CancelledError(message));
}

ScopedInterruptionCheck stop_inside_loops_if_abandoned(const grpc::ServerContextBase& ctx, std::string_view call) {
  return ScopedInterruptionCheck(
      [&ctx, call = std::string(call)] { stop_if_abandoned(ctx, call, "part of its data"); });
}

AbandonedHeavyWork abandoned_heavy_work() {
  return {abandoned_queued.load(std::memory_order_relaxed), abandoned_running.load(std::memory_order_relaxed)};
}

void run_heavy_work(BoundedExecutor& pool, const grpc::ServerContextBase& ctx, const std::function<void()>& work) {
  // Shared with the task: it notifies after releasing the lock, by which time this thread may
  // have seen `done` and returned, so the outcome cannot live on this stack. The error is moved
  // through it, never copied: the exception then ends on this thread, after the lock's handoff.
  // (A copy left with the task would be released there, ordered only by libstdc++'s and
  // Abseil's reference counts, which run uninstrumented and so look racy to ThreadSanitizer.)
  struct Outcome {
    Mutex mu;
    std::condition_variable cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    std::exception_ptr error ABSL_GUARDED_BY(mu);
  };
  const auto outcome = std::make_shared<Outcome>();
  // `work` and `ctx` outlive the task: this function returns only once the task has run.
  const bool queued = pool.try_submit([&work, &ctx, outcome] {
    std::exception_ptr error;
    try {
      if (ctx.IsCancelled()) throw ServiceError(heavy_work_abandoned());
      heavy_work_fault_point();
      work();
    } catch (...) {
      error = std::current_exception();
    }
    {
      MutexLock lock(&outcome->mu);
      outcome->error = std::move(error);
      outcome->done = true;
    }
    outcome->cv.notify_all();
  });
  if (!queued) throw ServiceError(pool_full_status(kHeavyWorkCalls, pool));
  std::exception_ptr error;
  {
    UniqueMutexLock lock(&outcome->mu);
    while (!outcome->done) outcome->cv.wait(lock.native());
    error = std::move(outcome->error);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace anvil::server
