// The service's persistent store: jobs, their metric streams and the model registry, so that a
// restarted server finds every job where it left it. An interface with two engines:
//   - SqliteStore (server/store_sqlite.h): one database file in the data dir, the embedded
//     default;
//   - PostgresStore (server/store_postgres.h): a PostgreSQL database that several anvild
//     replicas can share.
// open_store() picks the engine from the location. Both run the same versioned schema
// migrations when opened and honour the same contract, checked by one suite of tests run
// against each (tests/server/store_test.cc).
//
// Every operation that runs more than one statement runs in one transaction: atomic, also
// against another process or replica using the same database.
//
// Thread-safety: every engine serialises its methods internally; any number of threads may
// share a Store. Methods are short (indexed lookups and small writes).
//
// Errors are StoreError naming the operation, the engine's message and the database (never its
// password).
#pragma once

#include <cstdint>
#include <functional>
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
  // kIo: the file could not be read or written, the database cannot be reached: UNAVAILABLE.
  // kFenced: a write under a lease that another replica has since taken over was refused
  // (ABORTED). kOther: INTERNAL.
  enum class Kind { kOther, kFull, kIo, kFenced };
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
  int64_t seq = 0;  // insertion order (assigned by the store), for FIFO and listing
  // The crash-loop guard's count: starts that found the job RUNNING (the server died while it
  // ran) with no progress since the previous such start, i.e. resuming from the same checkpoint
  // step. A stop after the job checkpointed further starts the count again.
  int64_t crashes = 0;
  int64_t crash_step = -1;  // the checkpoint step the last counted crash resumed from; -1 = none
  // The lease (replicas, schema version 4). A replica runs a job only while it holds its lease:
  // `owner` is that replica's instance id ("" = none), `lease_epoch` the fencing epoch, one
  // higher at every claim and every takeover, and `lease_expires_ms` the database clock's time
  // (unix ms) the lease lapses unless renewed. Written only by the lease operations below and
  // update_job_fenced, never by update_job.
  std::string owner;
  int64_t lease_epoch = 0;
  int64_t lease_expires_ms = 0;
  bool cancel_requested = false;  // CancelJob on a replica that does not run it: the owner stops it
};

// One claim of a job by a replica: the history that proves each run of a job was one claim.
struct ClaimRow {
  std::string job_id;
  int64_t epoch = 0;
  std::string owner;
  int64_t claimed_ms = 0;
};

// A subscription to the store's change notices (Store::watch): it ends when destroyed.
class StoreWatch {
 public:
  virtual ~StoreWatch() = default;
};

// One node of a data-parallel job that spans replicas (docs/replicas.md): nodes 1..nnodes-1 of
// an attempt, each `nproc` ranks, opened by the replica that runs node 0 (the job's lease
// holder) and claimed by others. Every node of the attempt resumes from `checkpoint`.
struct JobPart {
  std::string job_id;
  int64_t epoch = 0;  // the job's lease epoch when the part was opened: a takeover ends it
  int attempt = 0;    // the rendezvous attempt
  int node = 0, nnodes = 0, nproc = 0;
  std::string checkpoint;  // artifact key every node resumes from; "" = a fresh start
  std::string state;       // "open", "running", "done", "failed"
  std::string owner;       // the replica running it ("" while open)
  std::string reason;      // "failed": why
  bool lapsed = false;     // running, but its owner's lease on it lapsed (parts(): grace given)
};

// What renew_leases found.
struct LeaseRenewal {
  std::vector<std::string> lost;              // held leases that are gone: stop those runs, write nothing
  std::vector<std::string> cancel_requested;  // renewed, but a replica asked the job to stop
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
  // The schema version this code reads and writes, in every engine.
  // Version 2 added jobs.crashes, version 3 jobs.crash_step, version 4 the leases (jobs.owner,
  // lease_epoch, lease_expires_ms, cancel_requested) and the claims table, version 5 the
  // rendezvous table of data-parallel ranks (workers/pg_rendezvous.h), version 6 the job_parts
  // table (nodes of data-parallel jobs across replicas); an older store is
  // migrated when opened, and one newer than this is refused (it was written by a newer Anvil).
  static constexpr int64_t kSchemaVersion = 6;

  virtual ~Store() = default;

  // Inserts `row`, setting its id (when empty), seq and created_ms (when 0), and returns it
  // with true. When row.client_job_id is non-empty and a job already has it, inserts nothing
  // and returns that job with false: a client retrying a submit gets the job it created, even
  // if the retry's spec differs. Atomic. Throws when an explicitly given id is taken.
  virtual std::pair<JobRow, bool> insert_job(JobRow row) = 0;
  virtual std::optional<JobRow> get_job(const std::string& id) const = 0;
  virtual std::optional<JobRow> get_job_by_client_id(const std::string& client_job_id) const = 0;
  // Jobs per state (states without jobs are absent), one aggregate query.
  virtual std::map<JobState, int64_t> count_jobs_by_state() const = 0;
  // Newest first; empty `states` = all; `limit` <= 0 = no limit; with `before_seq` > 0, only
  // jobs older than that seq (the next page after a job: keyset pagination).
  virtual std::vector<JobRow> list_jobs(const std::vector<JobState>& states = {}, int64_t limit = 0,
                                        int64_t before_seq = 0) const = 0;
  // Finished jobs (SUCCEEDED, FAILED, CANCELLED) beyond the newest `keep` (<= 0: none are) or
  // finished before `finished_before_ms` (<= 0: none are), oldest first: the retention sweep's.
  virtual std::vector<std::string> expired_jobs(int64_t keep, int64_t finished_before_ms) const = 0;
  // Deletes the job and its metric events, atomically; false when no such job.
  virtual bool delete_job(const std::string& id) = 0;
  // Oldest first (seq ascending) among jobs in `states` (used to requeue / resume after a
  // restart); empty `states` = none.
  virtual std::vector<JobRow> jobs_in_states(const std::vector<JobState>& states) const = 0;
  // Writes every mutable field: state, reason, priority, device, started_ms, finished_ms, step,
  // epoch, checkpoint, model_name, model_version, crashes, crash_step. What a submit fixed (name,
  // client_job_id, spec_json, created_ms, seq) and the lease fields are kept as stored. With
  // `fence_epoch` > 0, only while the job's lease_epoch is still that: false, and nothing
  // written, when another replica has taken the job over. Throws if the id does not exist.
  virtual bool update_job(const JobRow& row, int64_t fence_epoch = 0) = 0;

  // Appends the event with the next seq of its job and returns that seq; atomic. Throws if
  // the job does not exist. With `fence_epoch` > 0, only while the job's lease_epoch is still
  // that: otherwise nothing is written and StoreError kFenced is thrown (a replica that lost
  // the job cannot add to its stream).
  virtual int64_t append_metric(MetricRow row, int64_t fence_epoch = 0) = 0;
  // Events with step >= from_step and seq > after_seq, in seq order, at most `limit` (<= 0: all).
  virtual std::vector<MetricRow> metrics(const std::string& job_id, int64_t from_step, int64_t after_seq = 0,
                                         int64_t limit = 0) const = 0;
  // A job's events of one kind ("finding"), in seq order.
  virtual std::vector<MetricRow> metrics_of_kind(const std::string& job_id, const std::string& kind) const = 0;
  // Deletes a job's "step" and "epoch" events with step > `step`: a job resumed from a
  // checkpoint at `step` replays those steps, and the stream must hold each step once. Other
  // kinds (state changes) are history and stay.
  virtual void truncate_metrics_after(const std::string& job_id, int64_t step) = 0;

  // Registers `row` under the next version of its name (assigned atomically, also across
  // replicas) and returns it.
  virtual ModelRow register_model(ModelRow row) = 0;
  // The given version of `name`, or its latest when version <= 0; nullopt when absent.
  virtual std::optional<ModelRow> get_model(const std::string& name, int64_t version) const = 0;
  // Versions of `name` (all models when empty), ordered by name, then version, after
  // (after_name, after_version) (the next page: keyset pagination), at most `limit` (<= 0: all).
  virtual std::vector<ModelRow> list_models(const std::string& name = "", int64_t limit = 0,
                                            const std::string& after_name = "", int64_t after_version = 0) const = 0;
  // The `limit` most recently registered versions of any model, newest first (the status page).
  virtual std::vector<ModelRow> recent_models(int64_t limit) const = 0;

  // --- Leases: how replicas share the jobs (docs/replicas.md) ---------------------------------
  // The highest-priority claimable job (QUEUED or INTERRUPTED, no cancel asked; priority
  // descending, then submission order) for which `fits` is true, claimed for `owner` in one
  // transaction: RUNNING, owner set, lease_epoch + 1, lease_expires_ms = the database's now +
  // lease_ms, and a claims row. Replicas claiming at once never get the same job (PostgreSQL:
  // FOR UPDATE SKIP LOCKED; SQLite: one writer). nullopt when none fits. `fits` runs inside the
  // transaction: it must be quick and must not call the store. It sees only the candidate's id,
  // priority, seq and, as `device`, the device its spec requests (a job that ran before holds
  // the device it was placed on in the column): the scan reads no spec, however large, and
  // every idle replica scans once a second.
  virtual std::optional<JobRow> claim_job(const std::string& owner, int64_t lease_ms,
                                          const std::function<bool(const JobRow&)>& fits) = 0;
  // Extends the leases `owner` holds on `held` (job id, epoch) to now + lease_ms. A lease that is
  // no longer there (taken over, requeued, the job ended) is reported lost.
  virtual LeaseRenewal renew_leases(const std::string& owner, const std::vector<std::pair<std::string, int64_t>>& held,
                                    int64_t lease_ms) = 0;
  // RUNNING jobs whose lease lapsed more than `grace_ms` ago by the database's clock, oldest
  // first: their replica died or was cut off.
  virtual std::vector<JobRow> lapsed_leases(int64_t grace_ms) const = 0;
  // Writes what update_job writes plus owner, lease_epoch and lease_expires_ms, only while the
  // job's lease_epoch is still `epoch`; false (nothing written) when it moved on. The one way
  // to change a job that a replica may hold.
  virtual bool update_job_fenced(const JobRow& row, int64_t epoch) = 0;
  // Asks the replica that runs the job to stop it (cancel_requested). False when the job ended
  // or does not exist.
  virtual bool request_cancel(const std::string& id) = 0;
  // The claims of `job_id` (all jobs' when empty), oldest first.
  virtual std::vector<ClaimRow> claims(const std::string& job_id = "") const = 0;

  // Nodes of data-parallel jobs spanning replicas (JobPart; schema version 6). PostgreSQL only:
  // the embedded engine is one replica, which runs every rank itself (StoreError otherwise).
  // Replaces the job's parts with nodes 1..nnodes-1 of `attempt`, open, while the job is
  // RUNNING under lease `epoch`; false (nothing opened) when it is not.
  virtual bool open_parts(const std::string& job_id, int64_t epoch, int attempt, int nnodes, int nproc,
                          const std::string& checkpoint);
  // Takes the first open part (by the job's priority and age) of at most `max_nproc` ranks of a
  // RUNNING job held by another replica, under a lease of `lease_ms` by the database's clock.
  virtual std::optional<JobPart> claim_part(const std::string& owner, int64_t lease_ms, int max_nproc);
  // Extends `owner`'s leases on `held`; returns those that are no longer its to run (the job
  // moved to another attempt, epoch or state, or the part was removed).
  virtual std::vector<JobPart> renew_parts(const std::string& owner, const std::vector<JobPart>& held,
                                           int64_t lease_ms);
  // Records how a part's ranks ended (done, or failed with `reason`), if `owner` still holds it.
  virtual void finish_part(const std::string& owner, const JobPart& part, bool ok, const std::string& reason);
  // The job's parts, node order; `lapsed` set for running ones whose lease lapsed more than
  // `grace_ms` ago.
  virtual std::vector<JobPart> parts(const std::string& job_id, int64_t grace_ms) const;
  // Removes the job's parts (it ended, or stopped here).
  virtual void remove_parts(const std::string& job_id);

  // Calls `on_change` (on a thread of the watch's own) when another process changed what a
  // scheduler acts on: "queued" (a job was submitted or requeued), "cancel" (a cancel was
  // asked), "reconnected" (notices may have been lost while the watch was away: look again),
  // "model VERSION NAME" (a model version was registered).
  // Null when the engine has no notices (SQLite: one process, which knows its own changes);
  // callers poll as well either way.
  virtual std::unique_ptr<StoreWatch> watch(std::function<void(std::string_view)> on_change) = 0;

  // Where the data lives, for messages: the SQLite file's path, or PostgreSQL's
  // "postgresql://user@host:port/db" without a password.
  virtual const std::string& path() const = 0;
  // "sqlite" or "postgresql".
  virtual std::string_view engine() const = 0;
};

// True when `location` names a PostgreSQL database (a postgresql:// or postgres:// URL).
bool is_postgres_location(std::string_view location);

struct StoreOptions {
  // SQLite: > 0 caps the database's size in pages (max_page_count): a write beyond it fails as
  // a full disk does (the tests use it to make one).
  int64_t sqlite_max_pages = 0;
  // PostgreSQL: PostgresStore::Options::io_timeout_ms and connect_timeout_s.
  int postgres_io_timeout_ms = 0;
  int postgres_connect_timeout_s = 10;
};

// Opens the store at `location`: a postgresql:// URL (libpq's URI form; TLS as its sslmode
// parameter asks), or else a SQLite file path.
std::unique_ptr<Store> open_store(const std::string& location, const StoreOptions& options = {});

}  // namespace anvil::server
