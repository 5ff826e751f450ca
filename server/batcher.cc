#include "server/batcher.h"

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "server/status.h"

namespace anvil::server {

Batcher::Batcher(std::shared_ptr<nn::Module> module, BatchingOptions options, BatchObserver observer, Runner runner)
    : module_(std::move(module)), options_(options), observer_(std::move(observer)), runner_(std::move(runner)) {}

Batcher::~Batcher() { close(); }

Tensor Batcher::run(Tensor input, Clock::time_point deadline) {
  auto req = std::make_shared<Request>();
  req->input = std::move(input);
  req->deadline = deadline;
  req->enqueued = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  ANVIL_SERVICE_CHECK(!closed_, grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  ANVIL_SERVICE_CHECK(queue_.size() < options_.max_queue, grpc::StatusCode::UNAVAILABLE, "the model's queue is full (",
                      options_.max_queue, " requests); retry with backoff");
  queue_.push_back(req);
  ReportDepthLocked();
  if (options_.max_delay.count() > 0) cv_.notify_all();  // a leader waiting out max_delay counts rows again
  if (!running_) {
    running_ = true;
    req->lead = true;
  }
  while (!req->done) {
    if (req->lead) {
      req->lead = false;
      Lead(lock);
      continue;
    }
    req->wake.wait(lock, [&] { return req->done || req->lead; });
  }
  if (req->error) std::rethrow_exception(req->error);
  return req->output;
}

void Batcher::Lead(std::unique_lock<std::mutex>& lock) {
  if (options_.enabled && options_.max_delay.count() > 0) {
    const Clock::time_point until = Clock::now() + options_.max_delay;
    auto rows = [&] {
      int64_t n = 0;
      for (const auto& r : queue_) n += r->input.size(0);
      return n;
    };
    cv_.wait_until(lock, until, [&] { return closed_ || rows() >= options_.max_batch; });
  }
  std::vector<std::shared_ptr<Request>> batch;
  int64_t rows = 0;
  while (!queue_.empty()) {
    const int64_t n = queue_.front()->input.size(0);
    if (!batch.empty() && (!options_.enabled || rows + n > options_.max_batch)) break;
    rows += n;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  ReportDepthLocked();
  lock.unlock();
  RunBatch(batch);
  lock.lock();
  for (auto& r : batch) {
    r->done = true;
    r->wake.notify_one();
  }
  if (!queue_.empty() && !closed_) {
    queue_.front()->lead = true;  // the oldest waiter runs the next batch
    queue_.front()->wake.notify_one();
  } else {
    running_ = false;
  }
}

void Batcher::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  for (auto& r : queue_) {
    r->error = std::make_exception_ptr(ServiceError(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    r->done = true;
    r->wake.notify_one();
  }
  queue_.clear();
  ReportDepthLocked();
  cv_.notify_all();
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Batcher::RunBatch(std::vector<std::shared_ptr<Request>>& batch) {
  const Clock::time_point now = Clock::now();
  std::vector<std::shared_ptr<Request>> live;
  for (auto& r : batch) {
    if (r->deadline <= now) {
      r->error = std::make_exception_ptr(
          ServiceError(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed while it was queued"));
    } else {
      live.push_back(r);
    }
  }
  if (live.empty()) return;
  if (observer_.on_queued) {
    for (const auto& r : live) observer_.on_queued(std::chrono::duration<double>(now - r->enqueued).count());
  }
  try {
    std::vector<Tensor> inputs;
    for (const auto& r : live) inputs.push_back(r->input);
    Tensor batch = inputs.size() == 1 ? inputs[0] : cat(inputs, 0);
    Tensor out;
    if (runner_) {
      out = runner_(module_, std::move(batch));
    } else {
      InferenceMode no_grad;
      out = module_->forward(batch);
    }
    int64_t row = 0;
    for (auto& r : live) {
      const int64_t n = r->input.size(0);
      r->output = live.size() == 1 ? out : out.narrow(0, row, n).contiguous();
      row += n;
    }
    if (observer_.on_batch) observer_.on_batch(row);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.batches += 1;
    stats_.rows += row;
    stats_.requests += static_cast<int64_t>(live.size());
  } catch (...) {
    if (live.size() == 1) {
      live[0]->error = std::current_exception();
      return;
    }
    // One bad request must not fail the others batched with it: run them one by one.
    for (auto& r : live) {
      std::vector<std::shared_ptr<Request>> one{r};
      r->error = nullptr;
      RunBatch(one);
    }
  }
}

}  // namespace anvil::server
