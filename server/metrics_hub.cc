#include "server/metrics_hub.h"

namespace anvil::server {

bool MetricsHub::Subscription::try_next(v1::MetricEvent* out) {
  MutexLock lock(&mu_);
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void MetricsHub::Subscription::set_listener(std::function<void()> listener) { listener_ = std::move(listener); }

bool MetricsHub::Subscription::closed() const {
  MutexLock lock(&mu_);
  return closed_;
}

void MetricsHub::Subscription::Push(const v1::MetricEvent& e, size_t capacity) {
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    if (queue_.size() >= capacity) queue_.pop_front();  // the reader re-reads it from the store
    queue_.push_back(e);
  }
  if (listener_) listener_();
}

std::shared_ptr<MetricsHub::Subscription> MetricsHub::subscribe(const std::string& job_id, size_t max_per_job,
                                                                size_t max_total, bool* full_server,
                                                                std::function<void()> listener) {
  auto s = std::make_shared<Subscription>();
  s->listener_ = std::move(listener);
  MutexLock lock(&mu_);
  if (full_server != nullptr) *full_server = subs_.size() >= max_total;
  if (subs_.size() >= max_total || subs_.count(job_id) >= max_per_job) return nullptr;
  if (closed_) {
    MutexLock sl(&s->mu_);
    s->closed_ = true;
  } else {
    subs_.emplace(job_id, s);
  }
  return s;
}

void MetricsHub::unsubscribe(const std::string& job_id, const std::shared_ptr<Subscription>& s) {
  MutexLock lock(&mu_);
  auto [b, e] = subs_.equal_range(job_id);
  for (auto it = b; it != e; ++it) {
    if (it->second == s) {
      subs_.erase(it);
      return;
    }
  }
}

void MetricsHub::publish(const v1::MetricEvent& event) {
  MutexLock lock(&mu_);
  auto [b, e] = subs_.equal_range(event.job_id());
  for (auto it = b; it != e; ++it) it->second->Push(event, capacity_);
}

MetricsHub::~MetricsHub() {
  close_all();
  if (ticker_.joinable()) ticker_.join();
}

void MetricsHub::start_ticker(std::chrono::milliseconds period) {
  MutexLock lock(&mu_);
  if (ticker_.joinable() || closed_) return;
  ticker_ = std::thread([this, period] {
    MutexLock lock(&mu_);
    while (!closed_) {
      tick_cv_.wait_for(mu_, period);
      if (closed_) break;
      for (auto& [id, s] : subs_) {
        if (s->listener_) s->listener_();
      }
    }
  });
}

void MetricsHub::close_all() {
  MutexLock lock(&mu_);
  closed_ = true;
  tick_cv_.notify_all();
  for (auto& [id, s] : subs_) {
    {
      MutexLock sl(&s->mu_);
      s->closed_ = true;
    }
    if (s->listener_) s->listener_();
  }
  subs_.clear();
}

}  // namespace anvil::server
