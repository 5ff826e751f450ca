// The rank supervisor: see supervisor.h.
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace anvil::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
}

// How likely a rank's death is the cause of a failure rather than a consequence of another
// rank's: 3 for a signal other than SIGPIPE, 2 for an exit code, 1 for SIGPIPE.
int FailureCause(int status) {
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGPIPE ? 1 : 3;
  return 2;
}

}  // namespace

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + SignalName(WTERMSIG(status)) + ")";
  }
  return "stopped (status " + std::to_string(status) + ")";
}

RankSupervisor::RankSupervisor(LaunchOptions options) : options_(std::move(options)) {
  if (options_.argv.empty()) throw std::invalid_argument("anvil-run: no program to run");
  if (options_.nproc < 1) throw std::invalid_argument("anvil-run: --nproc must be at least 1");
  if (options_.nnodes < 1 || options_.node_rank < 0 || options_.node_rank >= options_.nnodes) {
    throw std::invalid_argument("anvil-run: expected 0 <= --node-rank < --nnodes");
  }
  if (options_.max_restarts < 0) throw std::invalid_argument("anvil-run: --max-restarts must be >= 0");
  if (!options_.log) options_.log = [](const std::string&) {};
}

std::vector<pid_t> RankSupervisor::pids() const {
  MutexLock lock(&mu_);
  return pids_;
}

void RankSupervisor::signal(int sig) {
  MutexLock lock(&mu_);
  for (pid_t p : pids_) {
    if (p > 0) ::kill(p, sig);
  }
}

void RankSupervisor::request_stop(int sig) {
  MutexLock lock(&mu_);
  if (!stop_) stop_at_ = Clock::now();
  stop_ = true;
  for (pid_t p : pids_) {
    if (p > 0) ::kill(p, sig);
  }
}

std::vector<pid_t> RankSupervisor::Start(int attempt) {
  const int world = options_.nproc * options_.nnodes;
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<std::vector<std::string>> envs(options_.nproc);
  std::vector<std::string> logs(options_.nproc);
  // The launcher's environment with the options' variables on top; each rank adds its own.
  std::map<std::string, std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) inherited[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options_.env) inherited[k] = v;
  for (int local = 0; local < options_.nproc; ++local) {
    const int rank = options_.node_rank * options_.nproc + local;
    std::map<std::string, std::string> env = inherited;
    env["ANVIL_RANK"] = std::to_string(rank);
    env["ANVIL_LOCAL_RANK"] = std::to_string(local);
    env["ANVIL_WORLD_SIZE"] = std::to_string(world);
    env["ANVIL_LOCAL_WORLD_SIZE"] = std::to_string(options_.nproc);
    env["ANVIL_NODE_RANK"] = std::to_string(options_.node_rank);
    env["ANVIL_RESTART_ATTEMPT"] = std::to_string(attempt);
    env["ANVIL_MAX_RESTARTS"] = std::to_string(options_.max_restarts);
    env["ANVIL_JOB_ID"] = options_.job_id;
    env["ANVIL_SOCKET_FAMILY"] = options_.socket_family;
    if (!options_.ifname.empty()) env["ANVIL_SOCKET_IFNAME"] = options_.ifname;
    if (!options_.rdzv_dir.empty()) env["ANVIL_RDZV_DIR"] = options_.rdzv_dir;
    if (!options_.master_addr.empty()) {
      env["ANVIL_MASTER_ADDR"] = options_.master_addr;
      env["ANVIL_MASTER_PORT"] = std::to_string(options_.master_port);
    }
    if (local == 0 && options_.node_rank == 0 && options_.rank0_event_fd >= 0) env["ANVIL_EVENT_FD"] = "3";
    for (const auto& [k, v] : env) envs[local].push_back(k + "=" + v);
    if (options_.log_path) logs[local] = options_.log_path(rank);
  }
  std::vector<char*> argv;
  for (const auto& a : options_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  for (int local = 0; local < options_.nproc; ++local) {
    std::vector<char*> envp;
    for (auto& kv : envs[local]) envp.push_back(kv.data());
    envp.push_back(nullptr);
    int log_fd = -1;
    if (!logs[local].empty()) {
      log_fd = ::open(logs[local].c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log_fd < 0) throw std::runtime_error("anvil-run: cannot open " + logs[local] + ": " + std::strerror(errno));
    }
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("anvil-run: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the supervisor died before prctl took effect
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (log_fd >= 0) {
        ::dup2(log_fd, 1);
        ::dup2(log_fd, 2);
      }
      if (local == 0 && options_.rank0_event_fd >= 0) ::dup2(options_.rank0_event_fd, 3);  // clears CLOEXEC
      ::execvpe(argv[0], argv.data(), envp.data());
      const char msg[] = "anvil-run: cannot execute the program\n";
      (void)!::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    if (log_fd >= 0) ::close(log_fd);
    pids.push_back(pid);
  }
  return pids;
}

void RankSupervisor::StopAll(std::vector<pid_t>& pids, int first_global) {
  for (pid_t p : pids) {
    if (p > 0) ::kill(p, SIGTERM);
  }
  const auto deadline = Clock::now() + options_.stop_grace;
  bool any = true;
  while (any) {
    any = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      pid_t& p = pids[i];
      if (p <= 0) continue;
      int status = 0;
      const pid_t r = ::waitpid(p, &status, WNOHANG);
      if (r == p || (r < 0 && errno == ECHILD)) {
        if (r == p) {
          options_.log("rank " + std::to_string(first_global + static_cast<int>(i)) + " (pid " + std::to_string(p) +
                       ") " + describe_exit(status));
        }
        p = -1;
      } else {
        any = true;
      }
    }
    if (!any) break;
    if (Clock::now() >= deadline) {
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

LaunchResult RankSupervisor::run() {
  LaunchResult result;
  const int first_global = options_.node_rank * options_.nproc;
  for (int attempt = options_.first_attempt;; ++attempt) {
    result.attempt = attempt;
    if (options_.before_start) {
      try {
        options_.before_start(attempt);
      } catch (const std::exception& e) {
        result.reason = e.what();
        return result;
      }
    }
    std::vector<pid_t> pids = Start(attempt);
    {
      MutexLock lock(&mu_);
      pids_ = pids;
      if (stop_) {
        for (pid_t p : pids_) ::kill(p, SIGTERM);
      }
    }
    if (options_.on_start) options_.on_start(attempt, pids);
    std::string pid_list;
    for (size_t i = 0; i < pids.size(); ++i) {
      pid_list += (i ? ", " : "") + std::to_string(first_global + static_cast<int>(i)) + ":" + std::to_string(pids[i]);
    }
    options_.log("attempt " + std::to_string(attempt) + ": started ranks (rank:pid) " + pid_list);
    int failed = -1, failed_status = 0, running = options_.nproc;
    pid_t failed_pid = -1;
    // When one rank dies its peers usually die of it a moment later (SIGPIPE or a Gloo
    // "connection closed" exit), and a single sweep can see both. The log must name the rank
    // that died first, so after the first failure the sweep goes on for a short settle time
    // and keeps the likeliest cause: a signal other than SIGPIPE, then an exit code, then
    // SIGPIPE (a peer's socket closing under it).
    Clock::time_point settle_until{};
    // Each rank's pid is polled (never waitpid(-1): anvild supervises several jobs' ranks, and
    // anvil-run also owns the Redis store's process).
    while (running > 0 && (failed < 0 || (FailureCause(failed_status) < 3 && Clock::now() < settle_until))) {
      bool reaped = false;
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] <= 0) continue;
        int status = 0;
        const pid_t p = ::waitpid(pids[i], &status, WNOHANG);
        if (p != pids[i]) continue;
        reaped = true;
        const pid_t done = pids[i];
        pids[i] = -1;
        --running;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        if (failed >= 0) {
          // A later death of the same failure: logged, and it replaces the cause only when likelier.
          const int rank = first_global + static_cast<int>(i);
          if (FailureCause(status) <= FailureCause(failed_status)) {
            options_.log("rank " + std::to_string(rank) + " (pid " + std::to_string(done) + ") " +
                         describe_exit(status));
            continue;
          }
          options_.log("rank " + std::to_string(failed) + " (pid " + std::to_string(failed_pid) + ") " +
                       describe_exit(failed_status));
        } else {
          settle_until = Clock::now() + std::chrono::milliseconds(250);
        }
        failed_pid = done;
        failed = first_global + static_cast<int>(i);
        failed_status = status;
      }
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      MutexLock lock(&mu_);
      if (stop_ && Clock::now() - stop_at_ > options_.stop_timeout) {
        for (pid_t p : pids) {
          if (p > 0) ::kill(p, SIGKILL);  // a rank that ignored the stop (stuck in a collective)
        }
      }
    }
    bool stopped;
    {
      MutexLock lock(&mu_);
      stopped = stop_;
    }
    if (failed < 0 && running == 0) {
      MutexLock lock(&mu_);
      pids_.clear();
      result.succeeded = !stopped;
      result.stopped = stopped;
      result.exit_code = 0;
      return result;
    }
    const std::string why =
        "rank " + std::to_string(failed) + " (pid " + std::to_string(failed_pid) + ") " + describe_exit(failed_status);
    StopAll(pids, first_global);
    {
      MutexLock lock(&mu_);
      pids_.clear();
      stopped = stop_;
    }
    result.failed_rank = failed;
    result.reason = why;
    result.exit_code = WIFEXITED(failed_status) ? WEXITSTATUS(failed_status) : 128 + WTERMSIG(failed_status);
    if (stopped) {
      result.stopped = true;
      return result;
    }
    if (options_.restartable && !options_.restartable(failed_status)) {
      options_.log(why + "; the other ranks were stopped; not restarting (a restart would fail the same way)");
      return result;
    }
    if (result.restarts >= options_.max_restarts) {
      options_.log(why + "; the other ranks were stopped; no restarts left (--max-restarts " +
                   std::to_string(options_.max_restarts) + ")");
      return result;
    }
    ++result.restarts;
    options_.log(why + "; the other ranks were stopped; restarting all ranks from the last checkpoint (restart " +
                 std::to_string(result.restarts) + " of " + std::to_string(options_.max_restarts) + ")");
  }
}

}  // namespace anvil::launch
