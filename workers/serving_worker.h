// The serving side of a device: it runs the model work sent to it, each command with its
// reply. Like the training worker (worker.h) its boundary is a message interface: the server
// hands it a batch and waits for the batch's output.
//
// On a GPU one thread owns the device and a stream of its own: a model's placement and every
// forward pass run there, never on a gRPC thread, ordered among themselves and overlapping
// with the training workers' streams. On the CPU there is no stream to own, and a hand-off to
// another thread cost 15-20 us per batch and ~10 % of the throughput at 64 clients in the
// serving benchmark (bench/RESULTS.md), so a command runs on the caller's thread (models
// then also run concurrently, as before); kOwnThread asks for the thread anyway.
//
// Thread-safety: safe for concurrent use: any thread may send commands, read stats() or shut
// it down (one mutex over the queue).
#pragma once

#include <absl/status/statusor.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "core/nn/module.h"
#include "core/tensor/memory_budget.h"
#include "core/util/mutex.h"

namespace anvil::workers {

// Runs `module` on `input` (a CPU tensor [n, ...]) in inference mode; the reply is the output,
// moved back to the CPU.
struct ForwardBatch {
  std::shared_ptr<nn::Module> module;
  Tensor input;
  // kBFloat16 / kFloat16: the forward runs under autocast in that dtype (the weights stay
  // float32); the output comes back as float32 either way.
  ScalarType precision = kFloat32;
  // Non-null: the tensors the forward allocates (its output included, until the reply is
  // written) are charged to this budget, which the server shares among every Predict in flight;
  // beyond it the forward stops with OutOfMemoryError (RESOURCE_EXHAUSTED) before the memory is
  // touched.
  std::shared_ptr<MemoryBudget> budget;
};

// Moves `module`'s parameters and buffers to the worker's device.
struct PlaceModule {
  std::shared_ptr<nn::Module> module;
};

class ServingWorker {
 public:
  enum class Mode { kByDevice, kOwnThread };
  explicit ServingWorker(Device device, Mode mode = Mode::kByDevice);
  ~ServingWorker();
  ServingWorker(const ServingWorker&) = delete;
  ServingWorker& operator=(const ServingWorker&) = delete;

  Device device() const { return device_; }
  bool own_thread() const { return own_thread_; }

  // Each blocks until the worker's thread has run the command and returns its reply, or the
  // status of the error it raised (workers/status.h); UNAVAILABLE after shutdown().
  absl::StatusOr<Tensor> run(ForwardBatch command);
  absl::Status run(PlaceModule command);

  // Runs what is queued, then joins the thread.
  void shutdown();

  struct Stats {
    int64_t commands = 0;
  };
  Stats stats() const;

 private:
  struct Pending;
  absl::Status Submit(const std::shared_ptr<Pending>& p);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  void Execute(Pending& p);

  const Device device_;
  const bool own_thread_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace anvil::workers
