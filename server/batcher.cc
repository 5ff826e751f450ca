#include "server/batcher.h"

#include <absl/strings/str_cat.h>

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "server/status.h"

namespace anvil::server {

Batcher::Batcher(std::shared_ptr<nn::Module> module, BatchingOptions options, BatchObserver observer, Runner runner)
    : module_(std::move(module)), options_(options), observer_(std::move(observer)), runner_(std::move(runner)) {}

Batcher::~Batcher() { close(); }

absl::StatusOr<Tensor> Batcher::run(Tensor input, Clock::time_point deadline) {
  auto req = std::make_shared<Request>();
  req->input = std::move(input);
  req->deadline = deadline;
  req->enqueued = Clock::now();
  UniqueMutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("the server is shutting down");
  if (queue_.size() >= options_.max_queue) {
    return absl::UnavailableError(
        absl::StrCat("the model's queue is full (", options_.max_queue, " requests); retry with backoff"));
  }
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
    req->wake.wait(lock.native());  // woken when done, or to lead; spurious wake-ups loop
  }
  if (!req->error.ok()) return req->error;
  return req->output;
}

int64_t Batcher::QueuedRowsLocked() const {
  int64_t n = 0;
  for (const auto& r : queue_) n += r->input.size(0);
  return n;
}

void Batcher::Lead(UniqueMutexLock& lock) {
  if (options_.enabled && options_.max_delay.count() > 0) {
    const Clock::time_point until = Clock::now() + options_.max_delay;
    while (!closed_ && QueuedRowsLocked() < options_.max_batch) {
      if (cv_.wait_until(lock.native(), until) == std::cv_status::timeout) break;
    }
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
  // Unlocked for the forward: through the Mutex, so the analysis follows (the caller's
  // UniqueMutexLock owns it again once this returns).
  mu_.unlock();
  RunBatch(batch);
  mu_.lock();
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
  MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  for (auto& r : queue_) {
    r->error = absl::UnavailableError("the server is shutting down");
    r->done = true;
    r->wake.notify_one();
  }
  queue_.clear();
  ReportDepthLocked();
  cv_.notify_all();
}

Batcher::Stats Batcher::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void Batcher::RunBatch(std::vector<std::shared_ptr<Request>>& batch) noexcept {
  // Whatever fails outside the forward (splitting the output, an observer, memory) fails the
  // requests it left unanswered: none may wait forever, and the leader must get back to
  // retake the lock it let go.
  const absl::Status failed = status_of([&] { RunBatchOrThrow(batch); });
  if (failed.ok()) return;
  for (auto& r : batch) {
    if (r->error.ok() && !r->output.defined()) r->error = failed;
  }
}

void Batcher::RunBatchOrThrow(std::vector<std::shared_ptr<Request>>& batch) {
  const Clock::time_point now = Clock::now();
  std::vector<std::shared_ptr<Request>> live;
  for (auto& r : batch) {
    if (r->deadline <= now) {
      r->error = absl::DeadlineExceededError("the request's deadline passed while it was queued");
    } else {
      live.push_back(r);
    }
  }
  if (live.empty()) return;
  if (observer_.on_queued) {
    for (const auto& r : live) observer_.on_queued(std::chrono::duration<double>(now - r->enqueued).count());
  }
  // The batch's forward: what it throws (concatenating the inputs, a forward without a
  // runner) becomes its status like the runner's own errors.
  absl::StatusOr<Tensor> out = status_of([&]() -> absl::StatusOr<Tensor> {
    std::vector<Tensor> inputs;
    for (const auto& r : live) inputs.push_back(r->input);
    Tensor batch = inputs.size() == 1 ? inputs[0] : cat(inputs, 0);
    if (runner_) return runner_(module_, std::move(batch));
    InferenceMode no_grad;
    return module_->forward(batch);
  });
  if (!out.ok()) {
    if (live.size() == 1) {
      live[0]->error = std::move(out).status();
      return;
    }
    // One bad request must not fail the others batched with it: run them one by one.
    for (auto& r : live) {
      std::vector<std::shared_ptr<Request>> one{r};
      RunBatch(one);
    }
    return;
  }
  int64_t row = 0;
  for (auto& r : live) {
    const int64_t n = r->input.size(0);
    r->output = live.size() == 1 ? *out : out->narrow(0, row, n).contiguous();
    row += n;
  }
  if (observer_.on_batch) observer_.on_batch(row);
  MutexLock lock(&mu_);
  stats_.batches += 1;
  stats_.rows += row;
  stats_.requests += static_cast<int64_t>(live.size());
}

}  // namespace anvil::server
