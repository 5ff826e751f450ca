// A data-parallel job's rank processes: see rank_group.h.
#include "workers/rank_group.h"

#include <absl/strings/str_cat.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/util/log.h"
#include "workers/rank_events.h"
#include "workers/rank_worker.h"

namespace anvil::workers {
namespace {

namespace fs = std::filesystem;

// The last non-empty line of a rank's log: usually the error it died with.
std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty() && line.rfind("anvil: CPU", 0) != 0) last = line;
  }
  return last.size() > 600 ? last.substr(0, 600) + "..." : last;
}

}  // namespace

std::string self_executable() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("anvild") : p.string();
}

RankGroupRun::RankGroupRun(RunJob job, std::function<void(const WorkerEvent&)> emit)
    : job_(std::move(job)), emit_(std::move(emit)) {}

void RankGroupRun::stop(bool interrupt) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_signal_ == 0) stop_signal_ = interrupt ? SIGTERM : SIGUSR1;
  if (supervisor_ != nullptr) supervisor_->request_stop(stop_signal_);
}

WorkerEvent RankGroupRun::run() {
  WorkerEvent base;
  base.job_id = job_.job_id;
  const int world = job_.spec.world_size();
  fs::create_directories(job_.job_dir);
  const std::string job_file = (fs::path(job_.job_dir) / "rank-job.json").string();
  write_rank_job(job_file, job_);
  // A fresh rendezvous folder per run: keys of an earlier run (before a server restart) must
  // not meet this one's ranks.
  const fs::path rdzv = fs::path(job_.job_dir) / "rendezvous";
  fs::remove_all(rdzv);
  fs::create_directories(rdzv);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    base.kind = WorkerEvent::Kind::kFailed;
    base.status = absl::ResourceExhaustedError("cannot make the ranks' event pipe (out of file descriptors)");
    return base;
  }
  // Rank 0's events: forwarded as they come, except the terminal one, which run() returns,
  // and repeated kStarted events of restarted attempts (the job started once).
  std::optional<WorkerEvent> terminal;
  bool started = false;
  std::thread reader([&, read_fd = fds[0]] {
    FILE* in = ::fdopen(read_fd, "r");
    char* line = nullptr;
    size_t cap = 0;
    while (in != nullptr && ::getline(&line, &cap, in) > 0) {
      try {
        WorkerEvent e = decode_rank_event(line);
        e.job_id = job_.job_id;
        switch (e.kind) {
          case WorkerEvent::Kind::kSucceeded:
          case WorkerEvent::Kind::kFailed:
          case WorkerEvent::Kind::kCancelled:
          case WorkerEvent::Kind::kInterrupted:
            terminal = e;
            break;
          case WorkerEvent::Kind::kStarted:
            if (started) {
              engine_log(LogSeverity::kWarning, absl::StrCat("job ", job_.job_id, ": ", e.detail));
              break;
            }
            started = true;
            emit_(e);
            break;
          default:
            emit_(e);
        }
      } catch (const std::exception& ex) {
        engine_log(LogSeverity::kWarning, absl::StrCat("job ", job_.job_id, ": unreadable rank event: ", ex.what()));
      }
    }
    ::free(line);
    if (in != nullptr) ::fclose(in);
  });

  launch::LaunchOptions o;
  o.argv = {self_executable(), "--rank-worker", job_file};
  o.nproc = world;
  o.rdzv_dir = rdzv.string();
  o.ifname = "lo";
  o.job_id = job_.job_id;
  o.max_restarts = job_.spec.max_restarts();
  o.rank0_event_fd = fds[1];
  o.env["ANVIL_LOG_LEVEL"] = "warning";
  const std::string dir = job_.job_dir;
  o.log_path = [dir](int rank) { return (fs::path(dir) / ("rank-" + std::to_string(rank) + ".log")).string(); };
  o.log = [id = job_.job_id](const std::string& line) {
    engine_log(LogSeverity::kInfo, absl::StrCat("job ", id, ": ", line));
  };
  // Exit 1 is a job failure rank 0 reported (or a rank's own error): restarting would repeat it.
  o.restartable = [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 1); };
  launch::LaunchResult r;
  try {
    launch::RankSupervisor supervisor(o);
    {
      std::lock_guard<std::mutex> lock(mu_);
      supervisor_ = &supervisor;
      if (stop_signal_ != 0) supervisor.request_stop(stop_signal_);
    }
    r = supervisor.run();
    std::lock_guard<std::mutex> lock(mu_);
    supervisor_ = nullptr;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    supervisor_ = nullptr;
    r.reason = e.what();
  }
  ::close(fds[1]);  // the ranks are gone: the reader sees end of file
  reader.join();

  if (terminal && (r.succeeded || r.stopped || terminal->kind == WorkerEvent::Kind::kFailed)) return *terminal;
  WorkerEvent end = base;
  int stop_signal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_signal = stop_signal_;
  }
  if (r.stopped || stop_signal != 0) {
    // Stopped before rank 0 could report (killed while stopping): interrupted resumes from the
    // last checkpoint.
    end.kind = stop_signal == SIGUSR1 ? WorkerEvent::Kind::kCancelled : WorkerEvent::Kind::kInterrupted;
    end.message = "cancelled";
    return end;
  }
  end.kind = WorkerEvent::Kind::kFailed;
  std::string why = r.reason.empty() ? "the ranks ended without a result" : r.reason;
  if (r.failed_rank >= 0) {
    const std::string last = LastLine(o.log_path(r.failed_rank));
    if (!last.empty()) why += ": " + last;
  }
  end.status = absl::AbortedError(absl::StrCat("data-parallel job failed after ", r.restarts, " restart",
                                               r.restarts == 1 ? "" : "s", " (max_restarts ", o.max_restarts,
                                               "): ", why, " (rank logs: ", dir, "/rank-N.log)"));
  return end;
}

}  // namespace anvil::workers
