#include "workers/serving_worker.h"

#include <variant>

#include "core/autograd/grad_mode.h"
#include "core/backend/registry.h"
#include "core/util/error.h"

namespace anvil::workers {

struct ServingWorker::Pending {
  std::variant<ForwardBatch, PlaceModule> command;
  Tensor output;
  std::exception_ptr error;
  bool done = false;
  std::condition_variable finished;
};

ServingWorker::ServingWorker(Device device, Mode mode)
    : device_(device), own_thread_(mode == Mode::kOwnThread || !device.is_cpu()) {
  if (own_thread_) thread_ = std::thread([this] { Loop(); });
}

ServingWorker::~ServingWorker() { shutdown(); }

void ServingWorker::Submit(const std::shared_ptr<Pending>& p) {
  std::unique_lock<std::mutex> lock(mu_);
  ANVIL_CHECK(!quit_, "serving worker on ", device_.str(), ": shut down");
  if (!own_thread_) {
    ++stats_.commands;
    lock.unlock();
    Execute(*p);
    if (p->error) std::rethrow_exception(p->error);
    return;
  }
  queue_.push_back(p);
  cv_.notify_one();
  p->finished.wait(lock, [&] { return p->done; });
  if (p->error) std::rethrow_exception(p->error);
}

Tensor ServingWorker::run(ForwardBatch command) {
  auto p = std::make_shared<Pending>();
  p->command = std::move(command);
  Submit(p);
  return std::move(p->output);
}

void ServingWorker::run(PlaceModule command) {
  auto p = std::make_shared<Pending>();
  p->command = std::move(command);
  Submit(p);
}

void ServingWorker::Loop() {
  // The thread's own stream on a GPU (nothing on the CPU): its batches are ordered among
  // themselves and overlap with the training workers' streams.
  DeviceStreamScope stream(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit_ and nothing left
    std::shared_ptr<Pending> p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Execute(*p);
    lock.lock();
    ++stats_.commands;
    p->done = true;
    p->finished.notify_one();
  }
}

void ServingWorker::Execute(Pending& p) {
  try {
    if (auto* f = std::get_if<ForwardBatch>(&p.command)) {
      InferenceMode no_grad;
      p.output = f->module->forward(f->input.to(device_)).to(kCPU);
    } else {
      std::get<PlaceModule>(p.command).module->to(device_);
      synchronize(device_);
    }
  } catch (...) {
    p.error = std::current_exception();
  }
  p.command = {};  // release the module and the input before the reply
}

void ServingWorker::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (quit_) return;
    quit_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

ServingWorker::Stats ServingWorker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace anvil::workers
