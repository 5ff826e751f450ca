// A data-parallel job (JobSpec.world_size > 1) as rank child processes of anvild, supervised
// by launch::RankSupervisor: `anvild --rank-worker FILE` once per rank (rank_worker.h), the
// ranks meeting through Gloo's file store in the job's folder and talking over loopback.
// Rank 0's events arrive over a pipe and go to the worker's sink as if the worker had trained
// itself. A rank that dies or is cut off restarts all ranks from the last checkpoint (up to
// spec.max_restarts); a rank's failure is the job's, never the server's.
//
// Thread-safety: run() on the owning worker's thread; stop() from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/util/mutex.h"
#include "launcher/supervisor.h"
#include "workers/worker.h"

namespace anvil::workers {

class RankGroupRun {
 public:
  RankGroupRun(RunJob job, std::function<void(const WorkerEvent&)> emit);
  // Runs the ranks until the job ends; returns its terminal event (not yet emitted).
  WorkerEvent run();
  // Interrupt (checkpoint, kInterrupted) or cancel; applies even before run() started them.
  void stop(bool interrupt);

 private:
  RunJob job_;
  std::function<void(const WorkerEvent&)> emit_;
  Mutex mu_;
  launch::RankSupervisor* supervisor_ ABSL_GUARDED_BY(mu_) = nullptr;  // set while run() runs
  int stop_signal_ ABSL_GUARDED_BY(mu_) = 0;                           // 0: not stopped
  // Why node 0 ended the run's attempt early (this run's).
  std::string trouble_ ABSL_GUARDED_BY(mu_);
};

// The path of the running anvild binary (the ranks are started from it).
std::string self_executable();

}  // namespace anvil::workers
