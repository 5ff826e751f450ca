#include "workers/serving_worker.h"

#include <optional>
#include <variant>

#include "core/amp/autocast.h"
#include "core/autograd/grad_mode.h"
#include "core/backend/registry.h"
#include "core/tensor/memory_budget.h"
#include "core/util/error.h"
#include "workers/status.h"

namespace anvil::workers {

struct ServingWorker::Pending {
  std::variant<ForwardBatch, PlaceModule> command;
  Tensor output;
  absl::Status status;
  bool done = false;
  std::condition_variable finished;
};

ServingWorker::ServingWorker(Device device, Mode mode)
    : device_(device), own_thread_(mode == Mode::kOwnThread || !device.is_cpu()) {
  if (own_thread_) thread_ = std::thread([this] { Loop(); });
}

ServingWorker::~ServingWorker() { shutdown(); }

absl::Status ServingWorker::Submit(const std::shared_ptr<Pending>& p) {
  if (!own_thread_) {
    {
      MutexLock lock(&mu_);
      if (quit_) return absl::UnavailableError("the serving worker on " + device_.str() + " has shut down");
      ++stats_.commands;
    }
    Execute(*p);
    return p->status;
  }
  UniqueMutexLock lock(&mu_);
  if (quit_) return absl::UnavailableError("the serving worker on " + device_.str() + " has shut down");
  queue_.push_back(p);
  cv_.notify_one();
  while (!p->done) p->finished.wait(lock.native());
  return p->status;
}

absl::StatusOr<Tensor> ServingWorker::run(ForwardBatch command) {
  auto p = std::make_shared<Pending>();
  p->command = std::move(command);
  ANVIL_RETURN_IF_ERROR(Submit(p));
  return std::move(p->output);
}

absl::Status ServingWorker::run(PlaceModule command) {
  auto p = std::make_shared<Pending>();
  p->command = std::move(command);
  return Submit(p);
}

void ServingWorker::Loop() {
  // The thread's own stream on a GPU (nothing on the CPU): its batches are ordered among
  // themselves and overlap with the training workers' streams.
  DeviceStreamScope stream(device_);
  UniqueMutexLock lock(&mu_);
  while (true) {
    while (!quit_ && queue_.empty()) cv_.wait(lock.native());
    if (queue_.empty()) return;  // quit_ and nothing left
    std::shared_ptr<Pending> p = std::move(queue_.front());
    queue_.pop_front();
    mu_.unlock();  // through the Mutex, so the analysis follows; `lock` owns it again below
    Execute(*p);
    mu_.lock();
    ++stats_.commands;
    p->done = true;
    p->finished.notify_one();
  }
}

void ServingWorker::Execute(Pending& p) {
  p.status = engine_status_of([&] {
    if (auto* f = std::get_if<ForwardBatch>(&p.command)) {
      std::optional<MemoryBudgetScope> bound;
      if (f->budget != nullptr) bound.emplace(f->budget);
      InferenceMode no_grad;
      std::optional<AutocastGuard> amp;
      if (f->precision != kFloat32) amp.emplace(device_.type, f->precision);
      Tensor out = f->module->forward(f->input.to(device_));
      if (out.dtype() == kBFloat16 || out.dtype() == kFloat16) out = out.to(kFloat32);
      // Materialised here, under the bound: an output that is a broadcast view (a graph ending in
      // an Expand) would otherwise become its full size where the reply is written.
      p.output = out.to(kCPU).contiguous();
    } else {
      std::get<PlaceModule>(p.command).module->to(device_);
      synchronize(device_);
    }
  });
  p.command = {};  // release the module and the input before the reply
}

void ServingWorker::shutdown() {
  {
    MutexLock lock(&mu_);
    if (quit_) return;
    quit_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

ServingWorker::Stats ServingWorker::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace anvil::workers
