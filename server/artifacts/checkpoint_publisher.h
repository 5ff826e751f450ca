// Publishing checkpoints off the training thread. A checkpoint written by a job's worker is
// staged at once (a hard link beside it, so the worker may rotate or replace its file) and
// uploaded by this class's own thread; training goes on meanwhile. The job's row names a
// checkpoint only once it is published: the scheduler takes the newest published key with the
// job's next event (take_published), and waits for the last one before a job's final row
// (flush). A publication still queued when a newer checkpoint of the same job comes is dropped:
// the newer one supersedes it, so a slow store never queues more than one per job.
//
// Thread-safety: every member may be called from any thread; one thread uploads.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <string>
#include <thread>

#include "core/util/mutex.h"
#include "server/artifacts/artifact_store.h"

namespace anvil::server {

class CheckpointPublisher {
 public:
  explicit CheckpointPublisher(ArtifactStore& store);
  // Finishes the publication in flight and drops what is queued (a stopping server resumes its
  // jobs from the checkpoints their rows name), then joins its thread.
  ~CheckpointPublisher();
  CheckpointPublisher(const CheckpointPublisher&) = delete;
  CheckpointPublisher& operator=(const CheckpointPublisher&) = delete;

  // The checkpoint the job's row names as its run starts here (what pruning keeps until the
  // row names a newer one: take_published and flush hand those out and track them).
  void set_named(const std::string& job_id, const std::string& key);
  // Stages the checkpoint at `path` and queues its publication as job_checkpoints.h's key for
  // (`epoch`, `step`). Pruning never removes the checkpoint the job's row names. A staging
  // failure is logged and the checkpoint skipped.
  void submit(const std::string& job_id, int64_t epoch, int64_t step, const std::string& path);
  // The key of the job's newest checkpoint published since the last call, or "".
  std::string take_published(const std::string& job_id);
  // Waits until the job has nothing queued or in flight, then returns take_published().
  std::string flush(const std::string& job_id);
  // Waits as flush() does, then returns the job's newest published key, taken or not, else the
  // one its row names ("" = none), leaving it for take_published.
  std::string flush_newest(const std::string& job_id);
  // Drops the job's queued publication and what it published but nobody took (a run that lost
  // its lease records nothing more).
  void forget(const std::string& job_id);

 private:
  struct Pending {
    std::string job_id, staged;
    int64_t epoch = 0, step = 0;
  };
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void Wait(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);  // until nothing of the job is queued or in flight
  // Whether the job has a publication queued or in flight.
  bool BusyLocked(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ArtifactStore& store_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);                     // at most one per job
  std::map<std::string, std::string> published_ ABSL_GUARDED_BY(mu_);  // job -> newest key not taken
  std::map<std::string, std::string> named_ ABSL_GUARDED_BY(mu_);      // job -> the key its row names
  std::string in_flight_ ABSL_GUARDED_BY(mu_);                         // the job being uploaded, or ""
  bool forgot_in_flight_ ABSL_GUARDED_BY(mu_) = false;                 // forget() came during the upload
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace anvil::server
