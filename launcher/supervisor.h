// The rank supervisor behind `anvil-run` and anvild's data-parallel jobs, after torchrun's
// elastic agent: it starts one process per local rank with the rank environment
// (core/distributed/environment.h), watches them, and when one fails stops the others and
// starts them all again as a new rendezvous attempt, up to max_restarts times. The program
// resumes from its last checkpoint; a restart never meets a stale rank of the failed attempt,
// because the attempt number is part of the rendezvous prefix.
//
// Children die with the supervisor (PR_SET_PDEATHSIG): a killed launcher leaves no ranks
// behind holding ports and a half-finished collective.
//
// Thread-safety: run() on one thread; signal(), pids() and request_stop() from any thread.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/util/mutex.h"

namespace anvil::launch {

struct LaunchOptions {
  std::vector<std::string> argv;  // the program and its arguments
  int nproc = 1;                  // ranks on this node
  int nnodes = 1, node_rank = 0;  // nodes, and this one's index
  std::string master_addr;        // nnodes > 1: the Redis rendezvous store's host
  int master_port = 0;
  std::string rdzv_dir;                // Gloo's file store (single node default: a temp dir)
  std::string ifname;                  // ANVIL_SOCKET_IFNAME (single node default: lo)
  std::string socket_family = "ipv4";  // ANVIL_SOCKET_FAMILY
  std::string job_id = "job";
  int max_restarts = 0;
  int first_attempt = 0;  // the attempt number of the first start (a resumed job continues counting)
  std::chrono::milliseconds stop_grace{5000};     // after a failure: SIGTERM, then SIGKILL after this long
  std::chrono::milliseconds stop_timeout{60000};  // after request_stop: SIGKILL after this long
  std::map<std::string, std::string> env;         // extra variables for every rank
  // Per rank: where its stdout and stderr go ("" = inherited).
  std::function<std::string(int global_rank)> log_path;
  // Informational lines ("rank 1 (pid 42) was killed by signal 9 (SIGKILL); restarting ...").
  std::function<void(const std::string&)> log;
  // Whether a rank that ended with this waitpid status may restart the ranks (default: any
  // failure may). anvild's ranks exit 1 for a failure a restart would repeat.
  std::function<bool(int status)> restartable;
  // The write end of a pipe that local rank 0 gets as fd 3 (ANVIL_EVENT_FD=3); -1: none.
  int rank0_event_fd = -1;
  // Called before each attempt's ranks start (a multi-node coordinator opens the attempt's other
  // nodes here); an exception ends run() with its message as the reason.
  std::function<void(int attempt)> before_start;
  // Called once per attempt after the ranks were started, with their pids (global rank order).
  std::function<void(int attempt, const std::vector<pid_t>&)> on_start;
};

struct LaunchResult {
  bool succeeded = false;
  int exit_code = 0;     // 0 on success; else the failed rank's code, or 128 + its signal
  int failed_rank = -1;  // the first rank that failed in the last attempt
  int restarts = 0;
  int attempt = 0;       // the last attempt's number
  bool stopped = false;  // request_stop() ended it
  std::string reason;    // "rank 1 (pid 42) was killed by signal 9 (SIGKILL)"
};

class RankSupervisor {
 public:
  explicit RankSupervisor(LaunchOptions options);
  // Runs attempts until every rank exits 0, restarts are used up, or request_stop().
  LaunchResult run();
  // Sends `sig` to every running rank (the launcher forwards SIGINT/SIGTERM this way).
  void signal(int sig);
  // Sends `sig` to the ranks and makes run() return once they exited, without a restart; ranks
  // still running stop_timeout after it are killed.
  void request_stop(int sig = SIGTERM);
  std::vector<pid_t> pids() const;

 private:
  std::vector<pid_t> Start(int attempt);
  // SIGTERM, then SIGKILL after stop_grace; logs how each rank ended.
  void StopAll(std::vector<pid_t>& pids, int first_global);

  LaunchOptions options_;
  mutable Mutex mu_;
  std::vector<pid_t> pids_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point stop_at_ ABSL_GUARDED_BY(mu_);
};

// "exited with code 3" / "was killed by signal 9 (SIGKILL)" for a waitpid status.
std::string describe_exit(int status);

}  // namespace anvil::launch
