// The serving side of a device: one thread that owns the device (on a GPU, a stream of its
// own) and runs the model work sent to it, each command with its reply. Like the training
// worker (worker.h) its boundary is a message interface: the server hands it a batch and
// waits for the batch's output, so a model's forward passes, like its placement on the
// device, run on the thread that owns the device and never on a gRPC thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "core/nn/module.h"

namespace anvil::workers {

// Runs `module` on `input` (a CPU tensor [n, ...]) in inference mode; the reply is the output,
// moved back to the CPU.
struct ForwardBatch {
  std::shared_ptr<nn::Module> module;
  Tensor input;
};

// Moves `module`'s parameters and buffers to the worker's device.
struct PlaceModule {
  std::shared_ptr<nn::Module> module;
};

class ServingWorker {
 public:
  explicit ServingWorker(Device device);
  ~ServingWorker();
  ServingWorker(const ServingWorker&) = delete;
  ServingWorker& operator=(const ServingWorker&) = delete;

  Device device() const { return device_; }

  // Each blocks until the worker's thread has run the command; an error it raised is
  // rethrown here. After shutdown() they throw anvil::Error.
  Tensor run(ForwardBatch command);
  void run(PlaceModule command);

  // Runs what is queued, then joins the thread.
  void shutdown();

  struct Stats {
    int64_t commands = 0;
  };
  Stats stats() const;

 private:
  struct Pending;
  void Submit(const std::shared_ptr<Pending>& p);
  void Loop();

  const Device device_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool quit_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace anvil::workers
