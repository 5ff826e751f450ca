// A thread pool with a bounded queue: at most `max_threads` tasks run at once (threads are
// started as the load needs them and kept), at most `max_queue` wait; `try_submit` refuses
// beyond that instead of letting work, and the memory its requests hold, pile up.
//
// Thread-safety: safe for concurrent use (one mutex over the queue, the threads and the counts).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/util/mutex.h"

namespace anvil::server {

class BoundedExecutor {
 public:
  BoundedExecutor(int max_threads, int max_queue);
  ~BoundedExecutor();  // runs what is queued, then joins
  BoundedExecutor(const BoundedExecutor&) = delete;
  BoundedExecutor& operator=(const BoundedExecutor&) = delete;

  // False (and `task` not run) when max_queue tasks already wait.
  bool try_submit(std::function<void()> task);
  int threads() const;
  // Waits until no task runs or waits. With no new submissions (the server stopped taking
  // calls), everything a task touched is released once this returns.
  void wait_idle();
  int max_threads() const { return max_threads_; }
  int max_queue() const { return max_queue_; }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const int max_threads_, max_queue_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;  // a task ended with nothing left to run
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;     // threads waiting for a task (or started to)
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // tasks being run
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace anvil::server
