#include "server/metrics/service_metrics.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/backend/kernel_report.h"
#include "core/backend/registry.h"
#include "core/tensor/allocator.h"
#include "core/util/clock.h"

namespace anvil::server::metrics {
namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kJob = {"job", "name"};

// Process families, as the Prometheus client libraries name them.
void CollectProcess(Counter& cpu, Gauge& rss) {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(text.substr(close + 2));
    std::string f;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {  // fields 14 and 15: utime, stime (clock ticks)
      if (i == 14) utime = std::stod(f);
      if (i == 15) stime = std::stod(f);
    }
    advance_to(cpu, (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK)));
  }
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  if (statm >> pages >> resident) rss.Set(static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)));
}

}  // namespace

ServiceMetrics::ServiceMetrics(Registry& r)
    : job_loss(r.gauge("anvil_job_loss", "Latest loss of a job (mean over the last interval for train).",
                       {"job", "name", "split"})),
      job_grad_norm(
          r.gauge("anvil_job_grad_norm", "Gradient norm before clipping, mean over the last interval.", kJob)),
      job_learning_rate(r.gauge("anvil_job_learning_rate", "Current learning rate.", kJob)),
      job_step(r.gauge("anvil_job_step", "Optimizer steps done.", kJob)),
      job_epoch(r.gauge("anvil_job_epoch", "Epochs done.", kJob)),
      job_samples_per_second(r.gauge("anvil_job_samples_per_second", "Training throughput.", kJob)),
      job_data_wait_ratio(r.gauge("anvil_job_data_wait_ratio",
                                  "Share of wall time the training loop waited for the data loader.", kJob)),
      job_val_accuracy(r.gauge("anvil_job_val_accuracy_ratio", "Validation accuracy after the last epoch.", kJob)),
      job_step_seconds(r.histogram("anvil_job_step_duration_seconds",
                                   "Wall time per optimizer step (one observation per metric interval).", kJob,
                                   exponential_buckets(0.0001, 2, 16))),
      rank_step_seconds(r.gauge("anvil_train_rank_step_seconds",
                                "Data-parallel jobs: each rank's mean wall time per optimizer step over the last "
                                "interval (equal across ranks: the all-reduce waits for the slowest).",
                                {"job", "name", "rank"})),
      rank_data_wait_ratio(r.gauge("anvil_train_rank_data_wait_ratio",
                                   "Data-parallel jobs: each rank's share of wall time waiting for its data loader.",
                                   {"job", "name", "rank"})),
      rank_compute_seconds(r.gauge("anvil_train_rank_compute_seconds",
                                   "Data-parallel jobs: each rank's own compute per optimizer step over the last "
                                   "interval, its waits for data, peers and checkpoints excluded (a straggler shows "
                                   "as the largest).",
                                   {"job", "name", "rank"})),
      amp_loss_scale(
          r.gauge("anvil_amp_loss_scale", "Loss scale of a float16 job (mixed precision with loss scaling).", kJob)),
      amp_skipped_steps(r.counter("anvil_amp_skipped_steps_total",
                                  "Optimizer steps a float16 job skipped because a gradient was not finite (the "
                                  "loss scale backed off each time).",
                                  kJob)),
      jobs(r.gauge("anvil_jobs", "Jobs by state.", {"state"})),
      jobs_finished(r.counter("anvil_jobs_finished_total", "Jobs that ended, by outcome.", {"outcome"})),
      job_findings(r.counter("anvil_job_findings_total",
                             "Training-doctor findings fired on jobs (docs/doctor.md), by code and severity.",
                             {"code", "severity"})),
      predict_requests(
          r.counter("anvil_predict_requests_total", "Predict requests by model and status code.", {"model", "code"})),
      predict_latency(r.histogram("anvil_predict_latency_seconds", "Predict latency in the server.", {"model"},
                                  exponential_buckets(0.00005, 2, 18))),
      predict_queue(r.histogram("anvil_predict_queue_seconds", "Time a request waited before its batch ran.", {"model"},
                                exponential_buckets(0.00001, 2, 18))),
      predict_batch_rows(r.histogram("anvil_predict_batch_rows", "Rows per model forward (dynamic batching).",
                                     {"model"}, exponential_buckets(1, 2, 10))),
      predict_in_flight(r.gauge("anvil_predict_in_flight", "Predict requests being served.", {"model"})),
      predict_queue_depth(
          r.gauge("anvil_predict_queue_depth", "Requests waiting for a model's next batch.", {"model"})),
      models_loaded(r.gauge("anvil_models_loaded", "Model versions loaded for serving.")),
      models_loaded_bytes(r.gauge("anvil_models_loaded_bytes",
                                  "Bytes of the archives of the model versions loaded for serving (their weights).")),
      model_loads(r.counter("anvil_model_loads_total",
                            "Model versions read from their archives for serving, reloads after an unload included.")),
      device_busy_seconds(
          r.counter("anvil_device_busy_seconds_total", "Time a device's worker ran a job.", {"device"})),
      device_busy_ratio(
          r.gauge("anvil_device_busy_ratio", "Share of the last minute a device's worker ran a job.", {"device"})),
      allocator_allocated(
          r.gauge("anvil_allocator_allocated_bytes", "Bytes handed out by a device's allocator.", {"device"})),
      allocator_reserved(r.gauge("anvil_allocator_reserved_bytes",
                                 "Bytes held by a device's allocator (handed out + cached).", {"device"})),
      allocator_active_blocks(r.gauge("anvil_allocator_active_blocks",
                                      "Blocks handed out by a GPU's caching allocator (or held for another stream).",
                                      {"device"})),
      allocator_largest_free(r.gauge("anvil_allocator_largest_free_block_bytes",
                                     "Largest cached block of a GPU's allocator: the biggest request served without "
                                     "the driver.",
                                     {"device"})),
      allocator_fragmentation(r.gauge("anvil_allocator_fragmentation_ratio",
                                      "1 - largest free block / cached bytes of a GPU's allocator (high: cached memory "
                                      "no request can use).",
                                      {"device"})),
      allocator_device_mallocs(r.counter("anvil_allocator_device_mallocs_total",
                                         "Device allocations (and page mappings) made by a GPU's allocator.",
                                         {"device"})),
      allocator_ooms(
          r.counter("anvil_allocator_ooms_total", "Out-of-memory errors raised by a GPU's allocator.", {"device"})),
      store_fenced_writes(r.counter("anvil_store_fenced_writes_total",
                                    "Writes of a job's run refused because another replica has taken the job "
                                    "over (its lease lapsed): the fencing epoch at work.")
                              .with()),
      illegal_job_transitions(r.counter("anvil_illegal_job_transitions_total",
                                        "Worker events the job state machine does not allow from the job's state "
                                        "(a step for a finished job): ignored, each logged as an error.")
                                  .with()),
      process_cpu(r.counter("process_cpu_seconds_total", "User and system CPU time spent, in seconds.").with()),
      process_rss(r.gauge("process_resident_memory_bytes", "Resident memory size in bytes.").with()),
      registry_(r) {
  r.gauge("anvil_build_info", "Build information; the value is 1.", {"version"}).with({ANVIL_VERSION_STRING}).Set(1);
  const CpuKernelInfo cpu = kernel_report();
  r.gauge(
       "anvil_cpu_info",
       "The CPU and the kernels the engine runs on it (ISA level, float32 and bfloat16 GEMMs, intra-op threads); the "
       "value is 1.",
       {"model", "isa", "detected_isa", "gemm", "bf16_gemm", "threads", "features"})
      .with({cpu.model, cpu.isa, cpu.detected_isa, cpu.gemm, cpu.bf16_gemm, std::to_string(cpu.threads), cpu.features})
      .Set(1);
  r.gauge("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.")
      .with()
      .Set(static_cast<double>(unix_millis()) / 1000.0);
  r.add_collector([this] { Collect(); });
}

void ServiceMetrics::set_replica(const std::string& replica, const std::string& store) {
  registry_
      .gauge("anvil_replica_info",
             "This anvild replica's name (--instance) and its job store's engine; the value is 1.",
             {"replica", "store"})
      .with({replica, store})
      .Set(1);
}

void ServiceMetrics::job_ended(const std::string& job_id) {
  MutexLock lock(&mu_);
  ended_[job_id] = Clock::now();
}

double ServiceMetrics::BusySecondsLocked(Busy& b, Clock::time_point now) const {
  return b.seconds + (b.busy ? std::chrono::duration<double>(now - b.since).count() : 0.0);
}

void ServiceMetrics::device_busy(const std::string& device, bool busy) {
  MutexLock lock(&mu_);
  const auto now = Clock::now();
  Busy& b = busy_[device];
  if (b.window_start == Clock::time_point()) b.window_start = now;
  if (busy && !b.busy) {
    b.busy = true;
    b.since = now;
  } else if (!busy && b.busy) {
    const double dt = std::chrono::duration<double>(now - b.since).count();
    b.seconds += dt;
    b.busy = false;
    device_busy_seconds.with({device}).Increment(dt);
  }
}

void ServiceMetrics::Collect() {
  CollectProcess(process_cpu, process_rss);
  const AllocatorStats cpu = cpu_allocator()->stats();
  allocator_allocated.with({"cpu"}).Set(static_cast<double>(cpu.allocated_bytes));
  allocator_reserved.with({"cpu"}).Set(static_cast<double>(cpu.allocated_bytes + cpu.cached_bytes));
  // Page-locked host memory for copies to the GPUs (NOTE [ Pinned staging ]), when there are any.
  if (const Allocator* pinned = pinned_memory_allocator()) {
    const AllocatorStats p = pinned->stats();
    allocator_allocated.with({"cpu-pinned"}).Set(static_cast<double>(p.allocated_bytes));
    allocator_reserved.with({"cpu-pinned"}).Set(static_cast<double>(p.allocated_bytes + p.cached_bytes));
  }
  for (int i = 0; i < cuda_device_count(); ++i) {
    const Device d = CUDA(i);
    const AllocatorStats g = backend_for(d).allocator(d)->stats();
    allocator_allocated.with({d.str()}).Set(static_cast<double>(g.allocated_bytes));
    allocator_reserved.with({d.str()}).Set(static_cast<double>(g.allocated_bytes + g.cached_bytes));
    allocator_active_blocks.with({d.str()}).Set(static_cast<double>(g.active_blocks));
    allocator_largest_free.with({d.str()}).Set(static_cast<double>(g.largest_free_block));
    allocator_fragmentation.with({d.str()}).Set(g.fragmentation);
    advance_to(allocator_device_mallocs.with({d.str()}), static_cast<double>(g.num_system_allocs));
    advance_to(allocator_ooms.with({d.str()}), static_cast<double>(g.num_ooms));
  }
  MutexLock lock(&mu_);
  const auto now = Clock::now();
  for (auto& [device, b] : busy_) {
    // The share of a window of 5-60 s; a new window starts every minute.
    const double total = BusySecondsLocked(b, now);
    const double span = std::chrono::duration<double>(now - b.window_start).count();
    if (span >= 5) device_busy_ratio.with({device}).Set(std::min(1.0, (total - b.window_start_seconds) / span));
    if (span >= 60) {
      b.window_start = now;
      b.window_start_seconds = total;
    }
  }
  for (auto it = ended_.begin(); it != ended_.end();) {
    if (now - it->second < retention_) {
      ++it;
      continue;
    }
    for (Family<Gauge>* f : {&job_loss, &job_grad_norm, &job_learning_rate, &job_step, &job_epoch,
                             &job_samples_per_second, &job_data_wait_ratio, &job_val_accuracy, &amp_loss_scale,
                             &rank_step_seconds, &rank_data_wait_ratio, &rank_compute_seconds}) {
      f->remove_matching("job", it->first);
    }
    job_step_seconds.remove_matching("job", it->first);
    amp_skipped_steps.remove_matching("job", it->first);
    it = ended_.erase(it);
  }
}

}  // namespace anvil::server::metrics
