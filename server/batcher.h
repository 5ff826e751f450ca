// Dynamic batching for one served model: concurrent Predict calls are queued, and one thread
// runs them together — up to max_batch rows, waiting at most max_delay after the first
// queued request — then hands each caller its rows. One forward over 32 rows costs about as
// much as a few single-row ones, so under load throughput grows with the batch while a lone
// request waits at most max_delay.
//
// A request whose deadline passes while it is queued gets DEADLINE_EXCEEDED without running;
// a full queue answers UNAVAILABLE at once; close() fails whatever is still queued with
// UNAVAILABLE. With batching disabled every request runs alone, in arrival order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "core/nn/module.h"

namespace anvil::server {

struct BatchingOptions {
  bool enabled = true;
  int64_t max_batch = 32;                         // rows
  std::chrono::microseconds max_delay{1000};      // after the first queued request
  size_t max_queue = 4096;                        // requests
};

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;

  Batcher(std::shared_ptr<nn::Module> module, BatchingOptions options);
  ~Batcher();

  // The module's output for `input` [n, ...]; blocks. Throws ServiceError.
  Tensor run(Tensor input, Clock::time_point deadline);
  void close();

  struct Stats {
    int64_t batches = 0, rows = 0, requests = 0;
  };
  Stats stats() const;

 private:
  struct Request {
    Tensor input;
    Clock::time_point deadline;
    std::promise<Tensor> result;
  };
  void Loop();
  void RunBatch(std::vector<std::unique_ptr<Request>>& batch);

  std::shared_ptr<nn::Module> module_;
  const BatchingOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Request>> queue_;
  bool closed_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace anvil::server
