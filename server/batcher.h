// Dynamic batching for one served model: concurrent Predict calls are queued and run
// together, up to max_batch rows per forward, and each caller gets its own rows back.
//
// No batching thread: the caller that finds the model idle becomes the leader and runs a
// batch on its own thread, made of everything queued by then (up to max_batch rows, after
// waiting up to max_delay for more when max_delay > 0). Requests that arrive meanwhile queue
// up; when the leader's batch is done and requests are waiting, leadership passes to the
// oldest waiter, which runs the next batch. A lone request therefore runs at once with no
// thread hand-off, and under load batches form by themselves while the model is busy.
//
// A request whose deadline passes while it is queued gets DEADLINE_EXCEEDED without running;
// a full queue answers UNAVAILABLE at once; close() fails whatever is still queued with
// UNAVAILABLE. With batching disabled every request runs alone, in arrival order.
//
// Thread-safety: safe for concurrent use: run() from any number of threads, close() and
// stats() from any (one mutex over the queue; a batch's forward runs outside it).
#pragma once

#include <absl/status/statusor.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "core/nn/module.h"
#include "core/util/mutex.h"

namespace anvil::server {

struct BatchingOptions {
  bool enabled = true;
  int64_t max_batch = 32;                  // rows
  std::chrono::microseconds max_delay{0};  // extra wait for more rows; 0: batch what is queued
  size_t max_queue = 4096;                 // requests
  // Bytes of tensors the Predicts in flight may hold at once, all models together (their
  // decoded inputs, forwards and outputs: core/tensor/memory_budget.h), enforced where the
  // forward runs (the serving worker) and where inputs are decoded; 0: no bound.
  int64_t memory_limit = 0;
};

// Optional observers (metrics): rows per forward, each request's wait before its batch ran,
// and the number of requests queued (called with the batcher's lock held: keep it cheap).
struct BatchObserver {
  std::function<void(int64_t rows)> on_batch;
  std::function<void(double seconds)> on_queued;
  std::function<void(int64_t requests)> on_depth;
};

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;

  // Runs one batch: the module's output for the batch's input [rows, ...], on the CPU. The
  // server passes its serving worker's (workers/serving_worker.h: the forward runs on the
  // thread that owns the model's device); without one the batch runs on the leader's thread,
  // on the CPU.
  using Runner = std::function<absl::StatusOr<Tensor>(const std::shared_ptr<nn::Module>& module, Tensor input)>;

  Batcher(std::shared_ptr<nn::Module> module, BatchingOptions options, BatchObserver observer = {}, Runner runner = {});
  ~Batcher();

  // The module's output for `input` [n, ...]; blocks. UNAVAILABLE (closed, queue full),
  // DEADLINE_EXCEEDED (expired while queued), or the forward's own error.
  absl::StatusOr<Tensor> run(Tensor input, Clock::time_point deadline);
  void close();

  struct Stats {
    int64_t batches = 0, rows = 0, requests = 0;
  };
  Stats stats() const;

 private:
  // A queued call. Its fields after `deadline` are the batcher's mu_'s (the analysis cannot name
  // another object's lock here): the leader writes them, the caller reads them once woken.
  struct Request {
    Tensor input, output;
    Clock::time_point deadline, enqueued;
    absl::Status error;
    bool done = false;
    bool lead = false;  // this request's thread runs the next batch
    // Each waiter sleeps on its own condition: finishing a batch wakes exactly the callers
    // it served and the next leader, not every queued thread (with 64 callers queued and no
    // batching, waking all of them per request cost 6x the throughput).
    std::condition_variable wake;
  };
  // Called with mu_ held (through `lock`) by the leader: takes a batch, runs it unlocked, hands off.
  void Lead(UniqueMutexLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t QueuedRowsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a batch and answers each of its requests (an output or an error); never throws.
  void RunBatch(std::vector<std::shared_ptr<Request>>& batch) noexcept ABSL_LOCKS_EXCLUDED(mu_);
  void RunBatchOrThrow(std::vector<std::shared_ptr<Request>>& batch) ABSL_LOCKS_EXCLUDED(mu_);
  void ReportDepthLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (observer_.on_depth) observer_.on_depth(static_cast<int64_t>(queue_.size()));
  }

  std::shared_ptr<nn::Module> module_;
  const BatchingOptions options_;
  const BatchObserver observer_;
  const Runner runner_;
  mutable Mutex mu_;
  std::condition_variable cv_;  // a leader waiting out max_delay for rows
  std::deque<std::shared_ptr<Request>> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // a leader is running or about to run a batch
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace anvil::server
