// One rank of a data-parallel job, in a child process of anvild (`anvild --rank-worker FILE`,
// started by workers/rank_group.h): it reads the job from FILE, joins the ranks through the
// rendezvous its environment names, and trains its shard with DistributedDataParallel. Rank 0
// sends the job's events to anvild over the pipe ANVIL_EVENT_FD names (rank_events.h) and
// writes the checkpoints and the model archive.
//
// Signals: SIGTERM interrupts (every rank stops at the step they agree on, rank 0 checkpoints
// there, kInterrupted), SIGUSR1 cancels (kCancelled). Exit codes: 0 when the job ended as
// reported; kRankRestartable when a collective failed (a peer died or was cut off: the
// supervisor restarts all ranks from the checkpoint); 1 when the job itself failed (rank 0
// sent kFailed first; restarting would fail the same way).
#pragma once

#include <string>

#include "workers/worker.h"

namespace anvil::workers {

inline constexpr int kRankRestartable = 75;  // EX_TEMPFAIL

// Writes the file run_rank_worker reads: the job, with the paths its ranks need.
void write_rank_job(const std::string& path, const RunJob& job);

// The rank process's main: returns its exit code.
int run_rank_worker(const std::string& job_file);

}  // namespace anvil::workers
