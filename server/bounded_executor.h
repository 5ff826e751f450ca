// A thread pool with a bounded queue: at most `max_threads` tasks run at once (threads are
// started as the load needs them and kept), at most `max_queue` wait; `try_submit` refuses
// beyond that instead of letting work, and the memory its requests hold, pile up.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  void Run();

  const int max_threads_, max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;  // a task ended with nothing left to run
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  int idle_ = 0;     // threads waiting for a task (or started to)
  int running_ = 0;  // tasks being run
  bool stopping_ = false;
};

}  // namespace anvil::server
