// The recent serving numbers of each model, for the status page: request rate, latency
// percentiles, batch sizes and errors over the last minute, and the precision of each loaded
// version. Prometheus has the same requests as histograms (service_metrics.h), but a
// histogram's percentiles need PromQL; the page must show them on a machine with no Prometheus.
//
// Memory is bounded whatever the traffic: at most `max_models` names (callers pass registered
// names only; past the bound, the name idle longest is forgotten), and per name one counter
// per second of the window (requests, errors, batches, rows: exact at any rate) and the last
// `max_samples` latencies inside the window, which the percentiles are taken over (at more
// than max_samples a minute, the most recent ones). A percentile costs a copy of at most
// max_samples latencies.
//
// Thread-safety: safe for concurrent use (one mutex; each call holds it for O(1) amortised,
// summaries for O(max_samples + window seconds)).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/util/mutex.h"

namespace anvil::server::metrics {

class ServingStats {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServingStats(std::chrono::seconds window = std::chrono::seconds(60), size_t max_models = 256,
                        size_t max_samples = 4096);

  // One request answered (ok: status OK), taking `seconds` end to end.
  void on_request(const std::string& model, double seconds, bool ok, Clock::time_point now = Clock::now());
  // One batch of `rows` run by the model's batcher.
  void on_batch(const std::string& model, int64_t rows, Clock::time_point now = Clock::now());
  // A version was loaded with this precision ("fp32", "bf16", "int8", ...), or unloaded.
  void on_loaded(const std::string& model, int64_t version, const std::string& precision,
                 Clock::time_point now = Clock::now());
  void on_unloaded(const std::string& model, int64_t version);

  struct Summary {
    int64_t requests_total = 0;  // since the server started
    int64_t errors_total = 0;
    int64_t requests = 0;  // in the window
    int64_t errors = 0;
    double requests_per_second = 0;  // over the window, or since the first request when younger
    double p50_seconds = 0;          // of the window's last max_samples requests (0: none)
    double p99_seconds = 0;
    int64_t batches = 0;  // in the window
    double batch_rows_mean = 0;
    int64_t batch_rows_max = 0;
    std::map<int64_t, std::string> precision;  // version -> precision, for the versions loaded here now
  };
  Summary summary(const std::string& model, Clock::time_point now = Clock::now()) const;
  std::chrono::seconds window() const { return window_; }

 private:
  struct Latency {
    Clock::time_point at;
    double seconds;
  };
  // One second of the window (second: whole seconds on the clock; a slot whose second is not
  // in the window counts nothing).
  struct Second {
    int64_t second = -1;
    int64_t requests = 0, errors = 0, batches = 0, rows = 0, max_rows = 0;
  };
  struct Model {
    std::vector<Second> seconds;  // a ring: second s in slot s % window
    std::deque<Latency> latencies;
    int64_t requests_total = 0, errors_total = 0;
    Clock::time_point first_request{}, last_active{};
    std::map<int64_t, std::string> precision;
  };
  // The entry for `model` (a new name past max_models replaces the one idle longest).
  Model& Find(const std::string& model, Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Second& SlotAt(Model& m, Clock::time_point now) const;

  const std::chrono::seconds window_;
  const size_t max_models_, max_samples_;
  mutable Mutex mu_;
  std::map<std::string, Model> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace anvil::server::metrics
