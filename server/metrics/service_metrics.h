// The service's metric families (names after Prometheus conventions: base units, `_total`,
// `_seconds`, `_bytes`; histograms for latencies) and the collectors that refresh the
// read-on-scrape ones. One object, owned by the server, handed to the parts that record.
//
// Thread-safety: safe for concurrent use (the families are Registry's; the ended jobs and the
// devices' busy time are under one mutex, taken by the scrape's collector too).
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "core/util/mutex.h"
#include "server/metrics/registry.h"
#include "server/metrics/serving_stats.h"

namespace anvil::server::metrics {

class ServiceMetrics {
 public:
  explicit ServiceMetrics(Registry& registry);
  Registry& registry() { return registry_; }

  // Training, per job (labels job, name).
  Family<Gauge>& job_loss;  // + split = train | val
  Family<Gauge>& job_grad_norm;
  Family<Gauge>& job_learning_rate;
  Family<Gauge>& job_step;
  Family<Gauge>& job_epoch;
  Family<Gauge>& job_samples_per_second;
  Family<Gauge>& job_data_wait_ratio;
  Family<Gauge>& job_val_accuracy;
  Family<Histogram>& job_step_seconds;
  Family<Gauge>& rank_step_seconds;     // data-parallel jobs: + rank
  Family<Gauge>& rank_data_wait_ratio;  // data-parallel jobs: + rank
  Family<Gauge>& rank_compute_seconds;  // data-parallel jobs: + rank
  Family<Gauge>& amp_loss_scale;        // fp16 jobs (loss scaling)
  Family<Counter>& amp_skipped_steps;   // fp16 jobs: steps skipped for a non-finite gradient
  Family<Gauge>& jobs;                  // by state (a collector counts them)
  Family<Counter>& jobs_finished;       // by outcome
  Family<Counter>& job_findings;        // the training doctor's findings, by code and severity
  // Serving, per model.
  Family<Counter>& predict_requests;  // model, code
  Family<Histogram>& predict_latency;
  Family<Histogram>& predict_queue;
  Family<Histogram>& predict_batch_rows;
  Family<Gauge>& predict_in_flight;
  Family<Gauge>& predict_queue_depth;
  Family<Gauge>& models_loaded;
  Family<Gauge>& models_loaded_bytes;
  Family<Counter>& model_loads;  // archives read and made servable, reloads after an unload included
  // The last minute of each registered model's requests and batches, for the status page.
  ServingStats serving;
  // Devices.
  Family<Counter>& device_busy_seconds;
  Family<Gauge>& device_busy_ratio;
  Family<Gauge>& allocator_allocated;
  Family<Gauge>& allocator_reserved;
  // CUDA devices only (the caching device allocator's own statistics).
  Family<Gauge>& allocator_active_blocks;
  Family<Gauge>& allocator_largest_free;
  Family<Gauge>& allocator_fragmentation;
  Family<Counter>& allocator_device_mallocs;
  Family<Counter>& allocator_ooms;
  // Replicas: writes of a run whose lease another replica took over, refused by the fencing
  // epoch (the store stays the taker's).
  Counter& store_fenced_writes;
  // Worker events the job state machine does not allow from the row's state
  // (server/job_transitions.h): ignored, each logged as an error.
  Counter& illegal_job_transitions;
  // Process.
  Counter& process_cpu;
  Gauge& process_rss;

  // anvil_replica_info{replica, store}: which replica this is (its --instance) and its store's
  // engine. Prometheus's own `instance` label (the scrape target) tells replicas apart in every
  // series; this one names them as the store and the status page do.
  void set_replica(const std::string& replica, const std::string& store);
  // A job's series are dropped `retention` after it ended (bounded label cardinality).
  void job_ended(const std::string& job_id);
  void set_retention(std::chrono::seconds retention) {
    MutexLock lock(&mu_);
    retention_ = retention;
  }
  // Busy time of a device: call when a job starts and ends on it.
  void device_busy(const std::string& device, bool busy);

 private:
  void Collect() ABSL_LOCKS_EXCLUDED(mu_);
  Registry& registry_;
  Mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> ended_ ABSL_GUARDED_BY(mu_);
  std::chrono::seconds retention_ ABSL_GUARDED_BY(mu_){600};
  struct Busy {
    bool busy = false;
    std::chrono::steady_clock::time_point since;
    double seconds = 0;  // completed busy intervals
    std::chrono::steady_clock::time_point window_start;
    double window_start_seconds = 0;  // busy seconds at window_start
  };
  std::map<std::string, Busy> busy_ ABSL_GUARDED_BY(mu_);
  double BusySecondsLocked(Busy& b, std::chrono::steady_clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace anvil::server::metrics
