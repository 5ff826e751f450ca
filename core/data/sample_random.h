// Where the randomness of a sample comes from while a DataLoader builds it.
//
// Reproducible augmentation whatever the worker count: the loader opens a SampleRandomScope
// around each sample with a key derived from (loader seed, epoch, batch, position in batch).
// Inside the scope every random transform draws from Philox keyed by (that key, the
// transform's own seed), with a counter that advances per draw within the sample. So sample
// j of batch b gets the same crop and flip whether it was built on the training thread, on
// worker 0 or on worker 7 — the batches are bitwise identical for any num_workers. (PyTorch
// seeds each worker process instead, so its augmentations change with num_workers.)
//
// WorkerInfo mirrors torch.utils.data.get_worker_info() for user code that keeps per-worker
// state (a file handle, a decoder): id, worker count and a per-worker seed derived from the
// loader's seed. It is null on threads that are not loader workers.
//
// Everything here is thread-local: no locks, no shared state.
#pragma once

#include <array>
#include <cstdint>

namespace anvil::data {

struct WorkerInfo {
  int id = 0;
  int num_workers = 0;
  uint64_t seed = 0;  // MixKey(loader seed, id): distinct per worker, fixed per loader seed
};

// The WorkerInfo of the calling loader worker thread, or nullptr elsewhere.
const WorkerInfo* worker_info();

// Installs `info` as the calling thread's WorkerInfo until destroyed.
class WorkerInfoScope {
 public:
  explicit WorkerInfoScope(const WorkerInfo& info);
  ~WorkerInfoScope();
  WorkerInfoScope(const WorkerInfoScope&) = delete;
  WorkerInfoScope& operator=(const WorkerInfoScope&) = delete;

 private:
  const WorkerInfo* previous_;
  WorkerInfo info_;
};

// Routes the random transforms of the calling thread to the per-sample stream `sample_key`
// until destroyed. Scopes nest; the innermost wins.
class SampleRandomScope {
 public:
  explicit SampleRandomScope(uint64_t sample_key);
  ~SampleRandomScope();
  SampleRandomScope(const SampleRandomScope&) = delete;
  SampleRandomScope& operator=(const SampleRandomScope&) = delete;

 private:
  bool previous_active_;
  uint64_t previous_key_;
  uint64_t previous_counter_;
};

// True inside a SampleRandomScope on this thread.
bool sample_random_active();
// The next Philox block of the current sample's stream for a transform seeded `stream_seed`.
// Requires sample_random_active().
std::array<uint32_t, 4> sample_random_draw(uint64_t stream_seed);

// The key of sample `position` of batch `batch` in epoch `epoch` of a loader seeded `seed`.
uint64_t sample_key(uint64_t seed, int64_t epoch, int64_t batch, int64_t position);

}  // namespace anvil::data
