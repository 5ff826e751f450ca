#include "server/bounded_executor.h"

namespace anvil::server {

BoundedExecutor::BoundedExecutor(int max_threads, int max_queue)
    : max_threads_(max_threads < 1 ? 1 : max_threads), max_queue_(max_queue < 0 ? 0 : max_queue) {}

BoundedExecutor::~BoundedExecutor() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool BoundedExecutor::try_submit(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    const int pending = static_cast<int>(queue_.size()) + 1;  // with this task
    if (running_ + pending > max_threads_ + max_queue_) return false;
    queue_.push_back(std::move(task));
    // A thread for it unless an idle one (or one just started) will take it.
    if (pending > idle_ && static_cast<int>(threads_.size()) < max_threads_) {
      ++idle_;  // counted idle from its start: it goes straight to the queue
      threads_.emplace_back([this] { Run(); });
    }
  }
  cv_.notify_one();
  return true;
}

void BoundedExecutor::wait_idle() {
  UniqueMutexLock lock(&mu_);
  while (!(running_ == 0 && queue_.empty())) idle_cv_.wait(lock.native());
}

int BoundedExecutor::threads() const {
  MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void BoundedExecutor::Run() {
  UniqueMutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && queue_.empty()) cv_.wait(lock.native());
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    --idle_;
    ++running_;
    lock.unlock();
    task();
    lock.lock();
    --running_;
    ++idle_;
    if (running_ == 0 && queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace anvil::server
