// Live metric events fanned out to StreamMetrics readers.
//
// Each subscription has a bounded queue, so a slow reader never slows training or grows the
// server's memory: when its queue is full the oldest event is dropped. Every event is also in
// the store with its per-job sequence number, so the stream notices the gap and reads the
// missing events from the store: a slow reader falls back to the store and still gets every
// event once, in order.
//
// Thread-safety: safe for concurrent use: publishers, subscribers and readers on any thread
// (the hub's mutex, then a subscription's); listeners run under the hub's lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/util/mutex.h"
#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::server {

class MetricsHub {
 public:
  class Subscription {
   public:
    // The next event if one is queued, without waiting (the listener says when to look).
    bool try_next(v1::MetricEvent* out);
    bool closed() const;
    // Called (on the publisher's thread, under the hub's lock: it must not call the hub) after
    // each event is queued and when the subscription closes: a reactor's wake-up.
    void set_listener(std::function<void()> listener);

   private:
    friend class MetricsHub;
    void Push(const v1::MetricEvent& e, size_t capacity);
    mutable Mutex mu_;  // taken after the hub's own when both are (publish, close_all)
    std::deque<v1::MetricEvent> queue_ ABSL_GUARDED_BY(mu_);
    bool closed_ ABSL_GUARDED_BY(mu_) = false;
    std::function<void()> listener_;  // set before the subscription is shared; the hub's lock orders its calls
  };

  explicit MetricsHub(size_t capacity_per_reader = 1024) : capacity_(capacity_per_reader) {}
  ~MetricsHub();

  // Null when `job_id` already has `max_per_job` subscriptions, or the hub `max_total` (each
  // is a stream); *full_server says which.
  std::shared_ptr<Subscription> subscribe(const std::string& job_id, size_t max_per_job = SIZE_MAX,
                                          size_t max_total = SIZE_MAX, bool* full_server = nullptr,
                                          std::function<void()> listener = nullptr);
  void unsubscribe(const std::string& job_id, const std::shared_ptr<Subscription>& s);
  void publish(const v1::MetricEvent& event);
  // Ends every subscription (server shutdown): readers see closed(); stops the ticker.
  void close_all();
  // Calls every subscription's listener each `period` from a thread of the hub's own, until
  // close_all: the wake-up of a reader whose job runs on another replica, whose events reach
  // this server only through the store (the reader polls it when no live event came).
  void start_ticker(std::chrono::milliseconds period);

 private:
  const size_t capacity_;
  Mutex mu_;
  std::multimap<std::string, std::shared_ptr<Subscription>> subs_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::condition_variable_any tick_cv_;
  std::thread ticker_;
};

}  // namespace anvil::server
