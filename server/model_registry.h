// Served models: the registry's rows (store) and the loaded modules with their batchers.
//
// A job's model is registered (name, next version) the moment the job succeeds and loaded
// from its archive in the same process, so it is servable at once; older versions stay
// servable. Models of earlier runs load lazily on first use. Each archive's SHA-256 is kept
// in the store, and a file that no longer matches is refused with DATA_LOSS.
//
// Thread-safety: safe for concurrent use. The loaded models are under one mutex and the
// prefetch queue under another; archives load and batches run outside both.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/models/archive.h"
#include "core/util/mutex.h"
#include "proto/anvil/v1/anvil.pb.h"
#include "server/artifacts/artifact_store.h"
#include "server/batcher.h"
#include "server/metrics/service_metrics.h"
#include "server/store.h"
#include "workers/serving_worker.h"

namespace anvil::server {

struct ServedModel {
  ModelRow row;
  models::LoadedModel loaded;
  std::string archive_path;  // the local file it was loaded from, checked against row's SHA-256
  int64_t bytes = 0;         // the archive's size: what its weights hold in memory, near enough
  std::unique_ptr<Batcher> batcher;
  std::atomic<int64_t> last_used{0};  // a use counter tick, for evicting the least recently used
};

// Whether a row's archive is an ONNX file registered from elsewhere (RegisterModel).
bool is_onnx_row(const ModelRow& row);

class ModelRegistry {
 public:
  // `metrics` may be null.
  // At most `max_loaded` versions stay resident, holding at most `max_loaded_bytes` of
  // archives (0: no byte bound); the least recently used ones are unloaded (and reloaded from
  // their archives on their next use), never the one just loaded. `metrics` may be null.
  // Served models run on `device`, on a serving worker that owns it (workers/serving_worker.h):
  // models are placed there and every batch runs there, off the gRPC threads.
  // Archives are published to and loaded from `artifacts` (null: the data root itself), so a
  // version registered on one replica is served by every replica; data_root keeps local copies.
  ModelRegistry(Store& store, std::string data_root, BatchingOptions batching,
                metrics::ServiceMetrics* metrics = nullptr, size_t max_loaded = 32, Device device = kCPU,
                ArtifactStore* artifacts = nullptr, int64_t max_loaded_bytes = 0);
  ~ModelRegistry();

  // Registers the archive at `relative_path` (inside the data root) as the next version of
  // `name`: publishes it to the artifact store under that key, checksummed, and loads it. Returns the stored row. An
  // archive whose path ends in
  // ".onnx" is an ONNX file from elsewhere (RegisterModel), served through the importer;
  // `labels` (optional) are kept with its row.
  absl::StatusOr<ModelRow> register_archive(const std::string& name, const std::string& job_id,
                                            const std::string& relative_path,
                                            const std::vector<std::string>& labels = {});

  // "latest" / "" / a version number. NOT_FOUND, INVALID_ARGUMENT (bad version), DATA_LOSS,
  // UNAVAILABLE once closed.
  absl::StatusOr<std::shared_ptr<ServedModel>> get(const std::string& name, const std::string& version);
  // The unfinished job (queued, running or interrupted) that registers `name` on success.
  std::optional<JobRow> pending_job_for(const std::string& name) const;
  // Whether `name` is registered (in memory when it was served before; else the store).
  bool knows(const std::string& name) const;

  v1::Model describe(const ServedModel& m) const;
  // A listed row's description: a resident version's, else one read from its archive without
  // making it resident (kept, so the next listing reads nothing).
  absl::StatusOr<v1::Model> describe_row(const ModelRow& row);

  // Validates the request's inputs against the model's signature and runs it through the
  // batcher: INVALID_ARGUMENT naming what was expected and what came, or get()'s and the
  // batcher's statuses.
  absl::StatusOr<v1::PredictResponse> predict(const v1::PredictRequest& request, Batcher::Clock::time_point deadline);

  // Loads `name` version `version` in the background (a replica registered it: the version is
  // loaded here before its first Predict, within the LRU's bounds). Returns at once; a version
  // already loaded or queued is skipped, and a failure is logged: Predict loads on first use
  // as before. At most 64 wait; more are dropped (first use covers them).
  void prefetch(const std::string& name, int64_t version);

  // Fails queued predictions with UNAVAILABLE and refuses new ones; stops the prefetching.
  void close();

  const std::string& data_root() const { return data_root_; }
  ArtifactStore& artifacts() const { return artifacts_; }

 private:
  // The bodies behind the public calls: they throw ServiceError (their callers return its status).
  std::shared_ptr<ServedModel> Get(const std::string& name, const std::string& version);
  ModelRow FindRow(const std::string& name, const std::string& version) const;
  v1::PredictResponse Predict(const v1::PredictRequest& request, Batcher::Clock::time_point deadline);
  // Load = Install(Prepare(row)). Prepare checks the archive against the row and builds the
  // model (an unreadable one is `unreadable`: DATA_LOSS for a stored row, INVALID_ARGUMENT for
  // an upload); Install gives it a batcher and makes it served.
  std::shared_ptr<ServedModel> Load(const ModelRow& row);
  std::shared_ptr<ServedModel> Prepare(const ModelRow& row, absl::StatusCode unreadable);
  std::shared_ptr<ServedModel> Install(std::shared_ptr<ServedModel> m);
  // Runs an imported model once on zeros of its signature (batch of one); INVALID_ARGUMENT
  // naming the node that fails. Skipped when the signature has named dims.
  // Returns the output's shape for that batch of one (empty when the input has named dims and
  // the forward was not run).
  IntArray TrialForward(const ServedModel& m);

  Store& store_;
  const std::string data_root_;
  std::unique_ptr<ArtifactStore> owned_artifacts_;  // when none was given: the data root
  ArtifactStore& artifacts_;
  const BatchingOptions batching_;
  const Device device_;
  // The thread that owns device_ for serving; each batcher's runner holds it too, so a batch
  // still running at shutdown finishes.
  std::shared_ptr<workers::ServingWorker> worker_;
  metrics::ServiceMetrics* metrics_;
  const size_t max_loaded_;
  const int64_t max_loaded_bytes_;
  // Every Predict's decoded input, forward and output are charged here: one bound for all the
  // batches in flight, whichever model they run (null: --max-predict-memory 0).
  const std::shared_ptr<MemoryBudget> predict_budget_;
  std::atomic<int64_t> tick_{0};
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable Mutex mu_;
  // Both are looked up by every Predict: hashed.
  using Loaded = absl::flat_hash_map<std::pair<std::string, int64_t>, std::shared_ptr<ServedModel>>;
  Loaded loaded_ ABSL_GUARDED_BY(mu_);
  // name -> its latest version, so a "latest" Predict needs no store query (this process is
  // the only writer of the registry).
  absl::flat_hash_map<std::string, int64_t> latest_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The descriptions of versions a listing read without installing them (describe_row); a
  // version's description never changes. Bounded: past it, the map starts over.
  static constexpr size_t kMaxDescriptions = 4096;
  absl::flat_hash_map<std::pair<std::string, int64_t>, v1::Model> descriptions_ ABSL_GUARDED_BY(mu_);

  // Prefetching: its own thread, started by the first prefetch().
  void Prefetch() ABSL_LOCKS_EXCLUDED(prefetch_mu_, mu_);
  Mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;
  std::deque<std::pair<std::string, int64_t>> prefetch_queue_ ABSL_GUARDED_BY(prefetch_mu_);
  bool prefetch_stopping_ ABSL_GUARDED_BY(prefetch_mu_) = false;
  std::thread prefetcher_ ABSL_GUARDED_BY(prefetch_mu_);
};

}  // namespace anvil::server
