#include "server/metrics_hub.h"

namespace anvil::server {

bool MetricsHub::Subscription::next(v1::MetricEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool MetricsHub::Subscription::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void MetricsHub::Subscription::Push(const v1::MetricEvent& e, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  if (queue_.size() >= capacity) queue_.pop_front();  // the reader re-reads it from the store
  queue_.push_back(e);
  cv_.notify_all();
}

std::shared_ptr<MetricsHub::Subscription> MetricsHub::subscribe(const std::string& job_id) {
  auto s = std::make_shared<Subscription>();
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    s->closed_ = true;
  } else {
    subs_.emplace(job_id, s);
  }
  return s;
}

void MetricsHub::unsubscribe(const std::string& job_id, const std::shared_ptr<Subscription>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [b, e] = subs_.equal_range(job_id);
  for (auto it = b; it != e; ++it) {
    if (it->second == s) {
      subs_.erase(it);
      return;
    }
  }
}

void MetricsHub::publish(const v1::MetricEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [b, e] = subs_.equal_range(event.job_id());
  for (auto it = b; it != e; ++it) it->second->Push(event, capacity_);
}

void MetricsHub::close_all() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  for (auto& [id, s] : subs_) {
    std::lock_guard<std::mutex> sl(s->mu_);
    s->closed_ = true;
    s->cv_.notify_all();
  }
  subs_.clear();
}

}  // namespace anvil::server
