// The service's persistent store: jobs, their metric streams and the model registry, kept in
// one SQLite database file so that a restarted server finds every job where it left it.
//
// Durability: WAL journal with synchronous=NORMAL, so a committed write survives a process
// crash, and after a power loss the database is consistent but may miss the last
// transactions. Every operation that runs more than one statement runs in one
// BEGIN IMMEDIATE transaction, so it is atomic even against another process using the file.
//
// Thread-safety: a Store holds one connection and serialises every method on one mutex; any
// number of threads may share a Store. Methods are short (indexed lookups and small writes).
//
// Errors are anvil::Error naming the operation, SQLite's message and the database file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/error.h"

namespace anvil::server {

// A failure of the database itself (I/O, corruption, a full disk): the service answers
// INTERNAL, not INVALID_ARGUMENT, since the request was fine.
class StoreError : public Error {
 public:
  // kFull: the disk (or the database's size cap) is full: RESOURCE_EXHAUSTED, with the reason.
  // kIo: the file could not be read or written: UNAVAILABLE. kOther: INTERNAL.
  enum class Kind { kOther, kFull, kIo };
  explicit StoreError(const std::string& message, Kind kind = Kind::kOther) : Error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled, kInterrupted };

// The stored spelling: "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED".
std::string_view job_state_name(JobState state);
// The inverse of job_state_name; throws anvil::Error naming the bad value and the valid ones.
JobState parse_job_state(std::string_view name);
// A terminal job never runs again: SUCCEEDED, FAILED or CANCELLED. INTERRUPTED is not
// terminal: the server stopped under it and it resumes from its checkpoint.
bool is_terminal(JobState state);

struct JobRow {
  std::string id;                   // assigned by insert_job when empty: "job-" + 12 random lowercase hex chars
  std::string name, client_job_id;  // client_job_id empty = none; unique when non-empty
  std::string spec_json;            // the validated spec, as JSON text
  JobState state = JobState::kQueued;
  std::string reason;    // failure / cancel reason
  int64_t priority = 0;  // higher runs first
  std::string device;    // requested ("cpu", "cuda:0", "any"), then the placed device once running
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0;  // unix ms; 0 = not yet
  int64_t step = 0, epoch = 0;                              // progress
  std::string checkpoint;  // path relative to the data dir of the latest checkpoint, "" = none
  std::string model_name;  // registered model on success
  int64_t model_version = 0;
  int64_t seq = 0;      // insertion order (assigned by the store), for FIFO and listing
  int64_t crashes = 0;  // starts that found it RUNNING: the server died while it ran
};

// One event of a job's metric stream.
struct MetricRow {
  std::string job_id;
  // 1, 2, 3... per job, assigned by append_metric. Never reused, even after
  // truncate_metrics_after, so a follower's after_seq cursor stays valid across a resume.
  int64_t seq = 0;
  int64_t step = 0;          // training step the event belongs to
  std::string kind;          // "step", "epoch", "state", ...
  std::string payload_json;  // the event as JSON text
  int64_t time_ms = 0;       // unix ms; append_metric sets the current time when 0
};

struct ModelRow {
  std::string name;
  int64_t version = 0;  // assigned by register_model: 1 + the highest existing version of `name`
  std::string job_id;
  std::string path;            // relative to the data dir
  std::string signature_json;  // input/output dtypes and shapes, labels
  int64_t created_ms = 0;      // unix ms; register_model sets the current time when 0
};

class Store {
 public:
  // The schema version this code reads and writes.
  // Version 2 added jobs.crashes; a version 1 store is migrated when opened.
  static constexpr int64_t kSchemaVersion = 2;

  // Opens `db_path`, creating the file and the schema when missing. Refuses a database whose
  // schema is newer than kSchemaVersion (written by a newer Anvil) or that is not an Anvil store.
  // `max_pages` > 0 caps the database's size in pages (SQLite's max_page_count): a write
  // beyond it fails as a full disk does (the tests use it to make one).
  explicit Store(const std::string& db_path, int64_t max_pages = 0);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts `row`, setting its id (when empty), seq and created_ms (when 0), and returns it
  // with true. When row.client_job_id is non-empty and a job already has it, inserts nothing
  // and returns that job with false: a client retrying a submit gets the job it created, even
  // if the retry's spec differs. Atomic. Throws when an explicitly given id is taken.
  std::pair<JobRow, bool> insert_job(JobRow row);
  std::optional<JobRow> get_job(const std::string& id) const;
  std::optional<JobRow> get_job_by_client_id(const std::string& client_job_id) const;
  // Jobs per state (states without jobs are absent), one aggregate query.
  std::map<JobState, int64_t> count_jobs_by_state() const;
  // Newest first; empty `states` = all; `limit` <= 0 = no limit; with `before_seq` > 0, only
  // jobs older than that seq (the next page after a job: keyset pagination).
  std::vector<JobRow> list_jobs(const std::vector<JobState>& states = {}, int64_t limit = 0,
                                int64_t before_seq = 0) const;
  // Finished jobs (SUCCEEDED, FAILED, CANCELLED) beyond the newest `keep` (<= 0: none are) or
  // finished before `finished_before_ms` (<= 0: none are), oldest first: the retention sweep's.
  std::vector<std::string> expired_jobs(int64_t keep, int64_t finished_before_ms) const;
  // Deletes the job and its metric events, atomically; false when no such job.
  bool delete_job(const std::string& id);
  // Oldest first (seq ascending) among jobs in `states` (used to requeue / resume after a
  // restart); empty `states` = none.
  std::vector<JobRow> jobs_in_states(const std::vector<JobState>& states) const;
  // Writes every mutable field: state, reason, priority, device, started_ms, finished_ms, step,
  // epoch, checkpoint, model_name, model_version, crashes. What a submit fixed (name, client_job_id,
  // spec_json, created_ms, seq) is kept as stored. Throws if the id does not exist.
  void update_job(const JobRow& row);

  // Appends the event with the next seq of its job and returns that seq; atomic. Throws if
  // the job does not exist.
  int64_t append_metric(MetricRow row);
  // Events with step >= from_step and seq > after_seq, in seq order, at most `limit` (<= 0: all).
  std::vector<MetricRow> metrics(const std::string& job_id, int64_t from_step, int64_t after_seq = 0,
                                 int64_t limit = 0) const;
  // Deletes a job's "step" and "epoch" events with step > `step`: a job resumed from a
  // checkpoint at `step` replays those steps, and the stream must hold each step once. Other
  // kinds (state changes) are history and stay.
  void truncate_metrics_after(const std::string& job_id, int64_t step);

  // Registers `row` under the next version of its name (assigned atomically) and returns it.
  ModelRow register_model(ModelRow row);
  // The given version of `name`, or its latest when version <= 0; nullopt when absent.
  std::optional<ModelRow> get_model(const std::string& name, int64_t version) const;
  // Versions of `name` (all models when empty), ordered by name, then version, after
  // (after_name, after_version) (the next page: keyset pagination), at most `limit` (<= 0: all).
  std::vector<ModelRow> list_models(const std::string& name = "", int64_t limit = 0, const std::string& after_name = "",
                                    int64_t after_version = 0) const;

  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::server
