// DataLoader, after torch.utils.data.DataLoader, with worker THREADS instead of processes.
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2, .seed = 7});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (Example& batch : loader) train_step(batch["input"], batch["target"]);
//
// What it guarantees, and why (each is a PyTorch pitfall made impossible):
// - Memory: the workers share the one dataset object. No per-worker copy exists, so an
//   in-memory dataset costs its size once whatever num_workers is.
// - Determinism: batch k of epoch e holds the same samples, with the same augmentation, for
//   any num_workers (0 included) and any scheduling. Batches are delivered in order through a
//   reorder buffer, and random transforms draw from a per-sample stream keyed by
//   (seed, epoch, k, position) — see sample_random.h.
// - Epochs: each completed (or abandoned) pass advances the epoch, and the loader calls
//   set_epoch on its sampler before every pass, so shuffling and DistributedSampler shards
//   change every epoch without anyone remembering set_epoch.
// - Bounded prefetch: at most num_workers * prefetch_factor batches are in flight (being built
//   or waiting to be consumed).
// - Errors: an exception while building a batch reaches the consumer as DataLoaderError with
//   the sample index, batch index, worker id and the original message; the pass ends.
// - Shutdown: destroying the loader (or ending a pass without persistent workers) stops and
//   joins every worker. Workers check for shutdown between samples, so destruction waits at
//   most for the samples being read at that moment, never for the rest of the epoch.
// - Observability: stats() reports the time the consumer spent waiting for each batch (the
//   data-wait time) and batches/s.
//
// Inside workers, kernels run serially on the worker thread (SerialGuard): loader threads
// never take the intra-op pool from the training thread.
//
// The first loader of a process fixes glibc's malloc thresholds (see NOTE [ malloc and loader
// threads ] in dataloader.cc; ANVIL_MALLOC_TUNING=0 opts out).
//
// Thread-safety: one consumer thread calls begin/next/set_epoch/set_position; stats() may be
// called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "core/data/collate.h"
#include "core/data/dataset.h"
#include "core/data/example.h"
#include "core/data/sampler.h"
#include "core/util/error.h"

namespace anvil::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;     // a RandomSampler keyed by (seed, epoch); exclusive with sampler
  bool drop_last = false;   // drop a last batch shorter than batch_size
  int num_workers = 0;      // 0: batches are built on the consumer's thread, when asked for
  int prefetch_factor = 2;  // batches in flight per worker
  // Keep the worker threads alive between passes (they are cheap threads, not processes, so
  // this mostly matters for per-worker state kept through worker_info()).
  bool persistent_workers = false;
  // Batches are delivered in page-locked memory (built by the worker that collates them), so
  // the training loop's copies to a GPU are queued without the host waiting (NOTE [ Pinned
  // staging ]). Without a usable CUDA device it does nothing (pins_memory() says so).
  bool pin_memory = false;
  // How long the consumer waits for one batch before DataLoaderError; 0 waits forever. Only
  // with workers (with none, the consumer builds the batch itself).
  std::chrono::milliseconds timeout{0};
  // The one seed behind shuffling, augmentation and the per-worker seeds.
  uint64_t seed = 0;
  std::shared_ptr<Sampler> sampler;             // custom index order; exclusive with shuffle
  std::shared_ptr<BatchSampler> batch_sampler;  // custom batches; exclusive with the above
  CollateFn collate;                            // default_collate when empty
};

// A failure while building a batch, with where it happened.
class DataLoaderError : public Error {
 public:
  DataLoaderError(const std::string& message, int64_t batch, int64_t sample, int worker)
      : Error(message), batch_(batch), sample_(sample), worker_(worker) {}
  int64_t batch_index() const { return batch_; }
  // The dataset index (map-style) or stream position (iterable) of the failing sample; -1 when
  // the failure was not in one sample (collate, timeout).
  int64_t sample_index() const { return sample_; }
  int worker_id() const { return worker_; }  // -1: the consumer's thread

 private:
  int64_t batch_, sample_;
  int worker_;
};

struct LoaderStats {
  int64_t epoch = 0;
  int64_t batches = 0;           // delivered in the current (or last) pass
  double last_wait_seconds = 0;  // the consumer's wait for the latest batch
  double wait_seconds = 0;       // summed over the pass
  double elapsed_seconds = 0;    // since the pass started
  double batches_per_second() const { return elapsed_seconds > 0 ? batches / elapsed_seconds : 0.0; }
  // Fraction of the pass the consumer spent blocked on data.
  double wait_ratio() const { return elapsed_seconds > 0 ? wait_seconds / elapsed_seconds : 0.0; }
};

// Where the next batch comes from: for checkpoints, so a resumed run sees exactly the batches
// an uninterrupted one would have.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = Example*;
    using reference = Example&;
    Example& operator*() { return *current_; }
    Example* operator->() { return &*current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return current_.has_value() == other.current_.has_value(); }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    Iterator() = default;
    DataLoader* loader_ = nullptr;
    std::optional<Example> current_;
  };

  // Starts a pass at position(). A pass still running is abandoned first (it counts as a
  // finished epoch, so the new pass has a new order).
  Iterator begin();
  Iterator end() { return Iterator(); }
  // The next batch of the running pass (starting one if none runs), or nullopt when the pass
  // is over, which advances the epoch.
  std::optional<Example> next();

  // Batches per epoch. Not known for an iterable dataset (throws).
  int64_t size() const;
  int64_t epoch() const;
  // The epoch of the next pass; cancels a running pass.
  void set_epoch(int64_t epoch);
  LoaderPosition position() const;
  // Resume: the next pass starts at batch `batch` of epoch `epoch`; cancels a running pass.
  void set_position(LoaderPosition position);
  LoaderStats stats() const;
  // The options of the running (or last) pass; num_workers changes at the next pass.
  const DataLoaderOptions& options() const { return options_; }
  // The worker threads of the next pass on (the running pass keeps its own): the batches, their
  // order and their samples stay the same whatever the count. Call from the consumer's thread,
  // like next(). Throws for a negative count.
  void set_num_workers(int num_workers);
  // Whether batches come in page-locked memory: pin_memory and a usable CUDA device.
  bool pins_memory() const;

 private:
  struct State;
  DataLoader(std::shared_ptr<const Dataset> map_dataset, std::shared_ptr<IterableDataset> iterable,
             DataLoaderOptions options);

  DataLoaderOptions options_;
  std::optional<int> next_num_workers_;  // set_num_workers, applied when the next pass starts
  std::unique_ptr<State> state_;
};

}  // namespace anvil::data
