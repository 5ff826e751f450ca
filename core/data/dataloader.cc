// DataLoader: see dataloader.h.
//
// NOTE [ Loader pipeline ]
// A pass has batches 0, 1, 2, ... Workers claim the lowest unclaimed batch id as long as
// fewer than num_workers * prefetch_factor batches are claimed but not yet consumed, build
// it, and post it to `ready` keyed by id. The consumer takes ids strictly in order, so the
// delivery order never depends on which worker finished first. Every pass has a generation
// number; a worker that finishes a batch of a cancelled pass drops it.
#include "core/data/dataloader.h"

#include <malloc.h>

#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>  // std::call_once
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/backend/registry.h"
#include "core/data/philox_stream.h"
#include "core/data/sample_random.h"
#include "core/util/mutex.h"
#include "core/util/thread_pool.h"

namespace anvil::data {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The outcome of building one batch.
struct Slot {
  std::optional<Example> batch;  // empty with no error: the stream ended before this batch
  std::exception_ptr error;
};

// Adds where a failure happened to its message. `sample` < 0: not in one sample (collate).
DataLoaderError Wrap(const std::exception& e, int64_t batch, int64_t sample, int worker, const char* what) {
  const std::string thread = worker < 0 ? "main thread" : "worker " + std::to_string(worker);
  const std::string where = sample < 0 ? "collating batch " + std::to_string(batch) + " (" + thread + ")"
                                       : std::string(what) + " " + std::to_string(sample) + " (batch " +
                                             std::to_string(batch) + ", " + thread + ")";
  return DataLoaderError("DataLoader: " + where + " failed: " + e.what(), batch, sample, worker);
}

// NOTE [ malloc and loader threads ]
// Decoders (stb_image, zlib) allocate and free a few hundred KiB per sample with malloc. By
// default glibc serves blocks that size with mmap and, in the arenas of non-main threads,
// trims freed memory back to the kernel, so every sample faults its buffers in again: a PNG
// pipeline ran 1.6x slower on a worker thread than on the main thread. Fixed thresholds keep
// that memory in the process (bounded: 4 MiB blocks, 64 MiB of slack per arena). Set once
// per process, the first time a loader is built; ANVIL_MALLOC_TUNING=0 leaves glibc alone.
void TuneMallocForLoaders() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("ANVIL_MALLOC_TUNING");
    if (env != nullptr && std::string_view(env) == "0") return;
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
  });
}

// The batch with every CPU tensor moved to page-locked memory (nested fields included).
Example PinExample(const Example& batch) {
  Example out;
  for (const Example::Field& f : batch.fields()) {
    if (f.nested) {
      out.set(f.name, PinExample(*f.nested));
    } else {
      out.set(f.name, f.tensor.device().is_cpu() ? f.tensor.pin_memory() : f.tensor);
    }
  }
  return out;
}

}  // namespace

struct DataLoader::State {
  using RawSamples = std::vector<std::pair<int64_t, Example>>;  // (stream position, sample)

  std::shared_ptr<const Dataset> dataset;       // map-style, or
  std::shared_ptr<IterableDataset> iterable;    // iterable
  std::shared_ptr<BatchSampler> batch_sampler;  // map-style only
  CollateFn collate;
  bool pin = false;                  // pin_memory, with a device to pin for
  std::vector<std::thread> threads;  // touched by the consumer thread only

  // Iterable only: serialises reading the stream (iterable->next and reset). Lock order:
  // stream_mu before mu.
  Mutex stream_mu ABSL_ACQUIRED_BEFORE(mu);
  bool stream_ended ABSL_GUARDED_BY(stream_mu) = false;

  mutable Mutex mu;
  std::condition_variable work_cv;   // workers wait for a batch to claim
  std::condition_variable ready_cv;  // the consumer waits for the next batch
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool active ABSL_GUARDED_BY(mu) = false;  // a pass is running
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  int64_t epoch ABSL_GUARDED_BY(mu) = 0;
  // Where the next pass starts; during a pass, where it started.
  int64_t start_batch ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::vector<int64_t>> batches ABSL_GUARDED_BY(mu);  // map-style: batches[k - start_batch]
  // First id past the pass (iterable: INT64_MAX until the end is read).
  int64_t end_batch ABSL_GUARDED_BY(mu) = 0;
  int64_t next_claim ABSL_GUARDED_BY(mu) = 0;
  int64_t next_deliver ABSL_GUARDED_BY(mu) = 0;
  std::map<int64_t, Slot> ready ABSL_GUARDED_BY(mu);
  Clock::time_point pass_start ABSL_GUARDED_BY(mu);
  LoaderStats stats ABSL_GUARDED_BY(mu);

  bool Cancelled(uint64_t gen) ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    return stop || generation != gen;
  }
  // A worker may claim the next batch: a pass runs, it is in it, and the prefetch bound allows.
  bool Claimable(int64_t max_in_flight) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return active && next_claim < end_batch && next_claim < next_deliver + max_in_flight;
  }
  // Batch k is built (or the pass ended before it).
  bool Arrived(int64_t k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ready.count(k) > 0 || k >= end_batch; }
  RawSamples ReadStream(const DataLoaderOptions& opt, int64_t k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu)
      ABSL_LOCKS_EXCLUDED(mu);
  std::optional<Slot> Build(const DataLoaderOptions& opt, int64_t k, uint64_t gen, int64_t ep, int worker,
                            const std::vector<int64_t>& indices, RawSamples raw) ABSL_LOCKS_EXCLUDED(mu);
  void WorkerLoop(const DataLoaderOptions& opt, int id) ABSL_LOCKS_EXCLUDED(stream_mu, mu);
  // `start`: when the consumer asked for the pass's first batch (the data-wait clock starts
  // there too, so the summed wait never exceeds the pass's elapsed time).
  void StartPass(const DataLoaderOptions& opt, Clock::time_point start) ABSL_LOCKS_EXCLUDED(stream_mu, mu);
  // The stream read again from the epoch's start up to start_batch.
  void RewindStream(const DataLoaderOptions& opt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu, mu);
  // The pass's counters from start_batch on, and the workers woken.
  void BeginPass(Clock::time_point start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void EndPass(bool finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void StopWorkers() ABSL_LOCKS_EXCLUDED(mu);
};

// Reads batch k's samples from the stream. Records the end of the stream.
DataLoader::State::RawSamples DataLoader::State::ReadStream(const DataLoaderOptions& opt, int64_t k) {
  RawSamples raw;
  const int64_t first = k * opt.batch_size;
  while (!stream_ended && static_cast<int64_t>(raw.size()) < opt.batch_size) {
    const int64_t position = first + static_cast<int64_t>(raw.size());
    std::optional<Example> ex;
    try {
      ex = iterable->next();
    } catch (const std::exception& e) {
      stream_ended = true;
      throw Wrap(e, k, position, worker_info() ? worker_info()->id : -1, "reading stream position");
    }
    if (!ex) {
      stream_ended = true;
      break;
    }
    raw.emplace_back(position, std::move(*ex));
  }
  const auto n = static_cast<int64_t>(raw.size());
  if (n < opt.batch_size) {
    if (opt.drop_last) raw.clear();
    MutexLock lock(&mu);
    end_batch = std::min(end_batch, raw.empty() ? k : k + 1);
    ready_cv.notify_all();
  }
  return raw;
}

std::optional<Slot> DataLoader::State::Build(const DataLoaderOptions& opt, int64_t k, uint64_t gen, int64_t ep,
                                             int worker, const std::vector<int64_t>& indices, RawSamples raw) {
  Slot slot;
  const size_t count = iterable ? raw.size() : indices.size();
  if (count == 0) return slot;  // iterable: past the end of the stream
  int64_t current = -1;
  try {
    std::vector<Example> samples;
    samples.reserve(count);
    for (size_t j = 0; j < count; ++j) {
      if (Cancelled(gen)) return std::nullopt;
      SampleRandomScope rng(sample_key(opt.seed, ep, k, static_cast<int64_t>(j)));
      if (iterable) {
        current = raw[j].first;
        samples.push_back(iterable->process(std::move(raw[j].second)));
      } else {
        current = indices[j];
        samples.push_back(dataset->get(current));
      }
    }
    current = -1;
    slot.batch = collate(samples);
    if (pin) slot.batch = PinExample(*slot.batch);
  } catch (const std::exception& e) {
    slot.error =
        std::make_exception_ptr(current < 0 ? Wrap(e, k, -1, worker, "") : Wrap(e, k, current, worker, "sample"));
  }
  return slot;
}

void DataLoader::State::WorkerLoop(const DataLoaderOptions& opt, int id) {
  WorkerInfoScope info_scope(WorkerInfo{id, opt.num_workers, MixKey(opt.seed, static_cast<uint64_t>(id))});
  SerialGuard serial;  // never take the intra-op pool from the training thread
  const int64_t max_in_flight = int64_t{opt.num_workers} * opt.prefetch_factor;
  UniqueMutexLock lock(&mu);
  while (true) {
    while (!stop && !Claimable(max_in_flight)) work_cv.wait(lock.native());
    if (stop) return;
    int64_t k = 0;
    uint64_t gen = 0;
    int64_t ep = 0;
    std::vector<int64_t> indices;
    std::optional<Slot> slot;
    RawSamples raw;
    if (iterable) {
      // Claiming an id and reading its samples must be one step, or two workers could read
      // the stream in the opposite order of their ids.
      lock.unlock();
      MutexLock stream_lock(&stream_mu);
      lock.lock();
      if (stop || !Claimable(max_in_flight)) continue;
      k = next_claim++;
      gen = generation;
      ep = epoch;
      lock.unlock();
      try {
        raw = ReadStream(opt, k);
      } catch (const DataLoaderError&) {
        slot = Slot{std::nullopt, std::current_exception()};
      }
    } else {
      k = next_claim++;
      gen = generation;
      ep = epoch;
      indices = batches[static_cast<size_t>(k - start_batch)];
      lock.unlock();
    }
    if (!slot) slot = Build(opt, k, gen, ep, id, indices, std::move(raw));
    lock.lock();
    if (slot && generation == gen) {
      ready.emplace(k, std::move(*slot));
      ready_cv.notify_all();
    }
  }
}

void DataLoader::State::StartPass(const DataLoaderOptions& opt, Clock::time_point start) {
  if (iterable) {
    MutexLock stream_lock(&stream_mu);
    MutexLock lock(&mu);
    ++generation;
    ready.clear();
    RewindStream(opt);
    BeginPass(start);
    return;
  }
  MutexLock lock(&mu);
  ++generation;
  ready.clear();
  batch_sampler->set_epoch(epoch);
  auto all = batch_sampler->batches();
  const auto n = static_cast<int64_t>(all.size());
  ANVIL_CHECK(start_batch <= n, "DataLoader: cannot start at batch ", start_batch, " of epoch ", epoch,
              ": the epoch has ", n, " batches");
  batches.assign(std::make_move_iterator(all.begin() + start_batch), std::make_move_iterator(all.end()));
  end_batch = n;
  BeginPass(start);
}

void DataLoader::State::RewindStream(const DataLoaderOptions& opt) {
  // A resumed pass re-reads and drops the samples before its first batch: a stream has no
  // random access.
  iterable->reset(epoch);
  stream_ended = false;
  end_batch = INT64_MAX;
  for (int64_t i = 0; i < start_batch * opt.batch_size && !stream_ended; ++i) {
    if (!iterable->next()) {
      stream_ended = true;
      end_batch = start_batch;
    }
  }
}

void DataLoader::State::BeginPass(Clock::time_point start) {
  next_claim = next_deliver = start_batch;
  active = true;
  pass_start = start;
  stats = LoaderStats{};
  stats.epoch = epoch;
  work_cv.notify_all();
}

void DataLoader::State::EndPass(bool finished) {
  if (active) stats.elapsed_seconds = Seconds(Clock::now() - pass_start);
  active = false;
  ++generation;
  ready.clear();
  batches.clear();
  if (finished) {
    ++epoch;
    start_batch = 0;
  } else {
    start_batch = next_deliver;  // a retry resumes at the batch that was not delivered
  }
}

void DataLoader::State::StopWorkers() {
  {
    MutexLock lock(&mu);
    stop = true;
  }
  work_cv.notify_all();
  for (auto& t : threads) t.join();
  threads.clear();
  MutexLock lock(&mu);
  stop = false;
}

// ---- DataLoader ----

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : DataLoader(std::move(dataset), nullptr, std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options)
    : DataLoader(nullptr, std::move(dataset), std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> map_dataset, std::shared_ptr<IterableDataset> iterable,
                       DataLoaderOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {
  TuneMallocForLoaders();
  const DataLoaderOptions& o = options_;
  ANVIL_CHECK(map_dataset != nullptr || iterable != nullptr, "DataLoader: the dataset is null");
  ANVIL_CHECK(o.num_workers >= 0, "DataLoader: expected num_workers >= 0, got ", o.num_workers);
  ANVIL_CHECK(o.prefetch_factor >= 1, "DataLoader: expected prefetch_factor >= 1, got ", o.prefetch_factor);
  ANVIL_CHECK(o.timeout.count() >= 0, "DataLoader: expected a non-negative timeout, got ", o.timeout.count(), " ms");
  ANVIL_CHECK(!(o.shuffle && o.sampler),
              "DataLoader: sampler and shuffle are mutually exclusive (the sampler "
              "decides the order; use a RandomSampler to shuffle)");
  if (o.batch_sampler) {
    ANVIL_CHECK(o.batch_size == 1 && !o.shuffle && !o.sampler && !o.drop_last,
                "DataLoader: batch_sampler is mutually exclusive with batch_size, shuffle, sampler and "
                "drop_last (the batch sampler decides all of them)");
  } else {
    ANVIL_CHECK(o.batch_size >= 1, "DataLoader: expected batch_size >= 1, got ", o.batch_size);
  }
  ANVIL_CHECK(iterable == nullptr || (!o.shuffle && !o.sampler && !o.batch_sampler),
              "DataLoader: an iterable dataset defines its own order; shuffle, sampler and batch_sampler do "
              "not apply to it");
  State& s = *state_;
  s.dataset = std::move(map_dataset);
  s.iterable = std::move(iterable);
  s.collate = o.collate ? o.collate : CollateFn(default_collate);
  s.pin = o.pin_memory && pinned_memory_allocator() != nullptr;
  if (s.dataset) {
    std::shared_ptr<Sampler> sampler = o.sampler;
    if (!sampler && o.shuffle) {
      sampler = std::make_shared<RandomSampler>(s.dataset->size(), false, std::nullopt, o.seed);
    }
    if (!sampler) sampler = std::make_shared<SequentialSampler>(s.dataset->size());
    s.batch_sampler =
        o.batch_sampler ? o.batch_sampler : std::make_shared<BatchSampler>(sampler, o.batch_size, o.drop_last);
  }
}

DataLoader::~DataLoader() {
  {
    MutexLock lock(&state_->mu);
    ++state_->generation;  // workers abandon their batch at the next sample boundary
  }
  state_->StopWorkers();
}

void DataLoader::set_num_workers(int num_workers) {
  ANVIL_CHECK(num_workers >= 0, "DataLoader: expected num_workers >= 0, got ", num_workers);
  next_num_workers_ = num_workers;
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), current_(loader->next()) {}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_.reset();  // release the previous batch before building the next
  current_ = loader_->next();
  return *this;
}

DataLoader::Iterator DataLoader::begin() {
  State& s = *state_;
  {
    MutexLock lock(&s.mu);
    if (s.active) s.EndPass(/*finished=*/true);  // an abandoned pass counts as an epoch
  }
  return Iterator(this);
}

std::optional<Example> DataLoader::next() {
  State& s = *state_;
  const auto t0 = Clock::now();
  bool active;
  {
    MutexLock lock(&s.mu);
    active = s.active;
  }
  if (!active) {
    if (next_num_workers_) {
      // Between passes no batch is claimed: idle persistent workers stop, and the new count's
      // threads start below.
      if (!s.threads.empty()) s.StopWorkers();
      options_.num_workers = *next_num_workers_;
      next_num_workers_.reset();
    }
    s.StartPass(options_, t0);
    if (options_.num_workers > 0 && s.threads.empty()) {
      for (int i = 0; i < options_.num_workers; ++i) {
        s.threads.emplace_back([this, i] { state_->WorkerLoop(options_, i); });
      }
    }
  }
  std::optional<Slot> slot;
  UniqueMutexLock lock(&s.mu);
  const int64_t k = s.next_deliver;
  if (options_.num_workers == 0) {
    if (k < s.end_batch) {
      const uint64_t gen = s.generation;
      const int64_t ep = s.epoch;
      std::vector<int64_t> indices;
      if (!s.iterable) indices = s.batches[static_cast<size_t>(k - s.start_batch)];
      lock.unlock();
      State::RawSamples raw;
      try {
        if (s.iterable) {
          MutexLock stream_lock(&s.stream_mu);
          raw = s.ReadStream(options_, k);
        }
        slot = s.Build(options_, k, gen, ep, -1, indices, std::move(raw));
      } catch (const DataLoaderError&) {
        slot = Slot{std::nullopt, std::current_exception()};
      }
      lock.lock();
    }
  } else {
    if (options_.timeout.count() > 0) {
      const Clock::time_point until = Clock::now() + options_.timeout;
      bool timed_out = false;
      while (!s.Arrived(k)) {
        if (s.ready_cv.wait_until(lock.native(), until) == std::cv_status::timeout) {
          timed_out = !s.Arrived(k);
          break;
        }
      }
      if (timed_out) {
        s.EndPass(/*finished=*/false);
        throw DataLoaderError("DataLoader: timed out after " + std::to_string(options_.timeout.count()) +
                                  " ms waiting for batch " + std::to_string(k) + " of epoch " +
                                  std::to_string(s.epoch) + " (num_workers=" + std::to_string(options_.num_workers) +
                                  ")",
                              k, -1, -1);
      }
    } else {
      while (!s.Arrived(k)) s.ready_cv.wait(lock.native());
    }
    if (auto it = s.ready.find(k); it != s.ready.end()) {
      slot = std::move(it->second);
      s.ready.erase(it);
    }
  }
  if (slot && slot->error) {
    s.EndPass(/*finished=*/false);
    std::rethrow_exception(slot->error);
  }
  if (!slot || !slot->batch) {  // past the last batch
    s.EndPass(/*finished=*/true);
    const bool stop_workers = !options_.persistent_workers;
    lock.unlock();
    if (stop_workers) s.StopWorkers();
    return std::nullopt;
  }
  ++s.next_deliver;
  const double wait = Seconds(Clock::now() - t0);
  s.stats.batches += 1;
  s.stats.last_wait_seconds = wait;
  s.stats.wait_seconds += wait;
  s.stats.elapsed_seconds = Seconds(Clock::now() - s.pass_start);
  lock.unlock();
  s.work_cv.notify_all();  // a prefetch slot is free
  return std::move(slot->batch);
}

bool DataLoader::pins_memory() const { return state_->pin; }

int64_t DataLoader::size() const {
  ANVIL_CHECK(state_->batch_sampler != nullptr,
              "DataLoader: the number of batches of an iterable dataset is "
              "unknown until its stream ends");
  return state_->batch_sampler->size();
}

int64_t DataLoader::epoch() const {
  MutexLock lock(&state_->mu);
  return state_->epoch;
}

void DataLoader::set_epoch(int64_t epoch) { set_position({epoch, 0}); }

LoaderPosition DataLoader::position() const {
  MutexLock lock(&state_->mu);
  return {state_->epoch, state_->active ? state_->next_deliver : state_->start_batch};
}

void DataLoader::set_position(LoaderPosition position) {
  ANVIL_CHECK(position.epoch >= 0 && position.batch >= 0,
              "DataLoader: expected a non-negative epoch and batch, "
              "got epoch ",
              position.epoch, " batch ", position.batch);
  MutexLock lock(&state_->mu);
  if (state_->active) state_->EndPass(/*finished=*/false);
  state_->epoch = position.epoch;
  state_->start_batch = position.batch;
}

LoaderStats DataLoader::stats() const {
  MutexLock lock(&state_->mu);
  LoaderStats out = state_->stats;
  if (state_->active) out.elapsed_seconds = Seconds(Clock::now() - state_->pass_start);
  return out;
}

}  // namespace anvil::data
