#include "server/batcher.h"

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "server/status.h"

namespace anvil::server {

Batcher::Batcher(std::shared_ptr<nn::Module> module, BatchingOptions options)
    : module_(std::move(module)), options_(options), thread_([this] { Loop(); }) {}

Batcher::~Batcher() { close(); }

Tensor Batcher::run(Tensor input, Clock::time_point deadline) {
  auto req = std::make_unique<Request>();
  req->input = std::move(input);
  req->deadline = deadline;
  std::future<Tensor> result = req->result.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ANVIL_SERVICE_CHECK(!closed_, grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
    ANVIL_SERVICE_CHECK(queue_.size() < options_.max_queue, grpc::StatusCode::UNAVAILABLE, "the model's queue is full (",
                        options_.max_queue, " requests); retry with backoff");
    queue_.push_back(std::move(req));
  }
  cv_.notify_all();
  return result.get();
}

void Batcher::close() {
  std::deque<std::unique_ptr<Request>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (auto& r : left) {
    r->result.set_exception(
        std::make_exception_ptr(ServiceError(grpc::StatusCode::UNAVAILABLE, "the server is shutting down")));
  }
  if (thread_.joinable()) thread_.join();
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Batcher::Loop() {
  while (true) {
    std::vector<std::unique_ptr<Request>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
      if (closed_) return;
      if (options_.enabled) {
        // Wait for more rows until the batch is full or the first request has waited max_delay.
        const Clock::time_point until = Clock::now() + options_.max_delay;
        auto rows = [&] {
          int64_t n = 0;
          for (const auto& r : queue_) n += r->input.size(0);
          return n;
        };
        cv_.wait_until(lock, until, [&] { return closed_ || rows() >= options_.max_batch; });
        if (closed_) return;
      }
      int64_t rows = 0;
      while (!queue_.empty()) {
        const int64_t n = queue_.front()->input.size(0);
        if (!batch.empty() && (!options_.enabled || rows + n > options_.max_batch)) break;
        rows += n;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
        if (!options_.enabled) break;
      }
    }
    RunBatch(batch);
  }
}

void Batcher::RunBatch(std::vector<std::unique_ptr<Request>>& batch) {
  const Clock::time_point now = Clock::now();
  std::vector<std::unique_ptr<Request>> live;
  for (auto& r : batch) {
    if (r->deadline <= now) {
      r->result.set_exception(std::make_exception_ptr(
          ServiceError(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed while it was queued")));
    } else {
      live.push_back(std::move(r));
    }
  }
  if (live.empty()) return;
  try {
    std::vector<Tensor> inputs;
    for (const auto& r : live) inputs.push_back(r->input);
    Tensor out;
    {
      InferenceMode no_grad;
      out = module_->forward(inputs.size() == 1 ? inputs[0] : cat(inputs, 0));
    }
    int64_t row = 0;
    for (auto& r : live) {
      const int64_t n = r->input.size(0);
      r->result.set_value(out.narrow(0, row, n).contiguous());
      row += n;
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.batches += 1;
    stats_.rows += row;
    stats_.requests += static_cast<int64_t>(live.size());
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    for (auto& r : live) r->result.set_exception(error);
  }
}

}  // namespace anvil::server
