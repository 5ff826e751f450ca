// A data-parallel job's rank processes: see rank_group.h.
#include "workers/rank_group.h"

#include <absl/strings/str_cat.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/util/log.h"
#include "core/util/mutex.h"
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
  MutexLock lock(&mu_);
  // A node of another replica's job stops at once: its ranks cannot agree on a stop step with
  // node 0 (which decides), and node 0 restarts the attempt on the replicas left.
  if (stop_signal_ == 0) stop_signal_ = job_.span.node > 0 ? SIGKILL : interrupt ? SIGTERM : SIGUSR1;
  if (supervisor_ != nullptr) supervisor_->request_stop(stop_signal_);
}

WorkerEvent RankGroupRun::run() {
  WorkerEvent base;
  base.job_id = job_.job_id;
  {
    MutexLock lock(&mu_);
    trouble_.clear();  // this run's
  }
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
  // Rank 0's events: forwarded as they come, except the terminal one, which run() returns.
  std::optional<WorkerEvent> terminal;
  bool started = false;
  // Sync marks ("#sync N"), written by this process after an attempt's ranks ended: once the
  // reader reached one, every event rank 0 sent before it was handled (its checkpoints queued
  // for publication).
  struct Synced {
    Mutex mu;
    std::condition_variable cv;
    int mark ABSL_GUARDED_BY(mu) = 0;  // the last mark the reader reached
  } sync_marks;
  std::thread reader([&, read_fd = fds[0]] {
    FILE* in = ::fdopen(read_fd, "r");
    char* line = nullptr;
    size_t cap = 0;
    while (in != nullptr && ::getline(&line, &cap, in) > 0) {
      if (std::strncmp(line, "#sync ", 6) == 0) {
        MutexLock lock(&sync_marks.mu);
        sync_marks.mark = std::atoi(line + 6);
        sync_marks.cv.notify_all();
        continue;
      }
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
            // A restarted attempt's start too: the scheduler drops the stored steps past its
            // checkpoint, which the attempt replays, so the job's history holds each step once.
            if (started) engine_log(LogSeverity::kWarning, absl::StrCat("job ", job_.job_id, ": ", e.detail));
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

  const RunJob::Span& span = job_.span;
  const bool spread = span.nnodes > 1;
  launch::LaunchOptions o;
  o.argv = {self_executable(), "--rank-worker", job_file};
  o.nproc = spread ? span.nproc : world;
  o.nnodes = spread ? span.nnodes : 1;
  o.node_rank = spread ? span.node : 0;
  o.rdzv_dir = spread ? "" : rdzv.string();
  o.ifname = spread ? span.ifname : "lo";
  o.job_id = spread ? span.rdzv_id : job_.job_id;
  // Node 0 restarts the attempt; another node runs one attempt and ends (node 0 opens the
  // next attempt's nodes, which any replica left may take).
  o.max_restarts = span.node > 0 ? 0 : job_.spec.max_restarts();
  o.first_attempt = span.node > 0 ? span.first_attempt : 0;
  o.rank0_event_fd = span.node > 0 ? -1 : fds[1];
  if (spread) {
    o.env["ANVIL_RDZV_URL"] = span.rdzv_url;
    if (span.rendezvous_timeout_s > 0) o.env["ANVIL_RENDEZVOUS_TIMEOUT_S"] = std::to_string(span.rendezvous_timeout_s);
  }
  std::atomic<int> running_attempt{-1};
  if (spread && span.node == 0) {
    o.before_start = [&, write_fd = fds[1]](int attempt) {
      running_attempt = -1;  // between attempts: nothing for the watcher to end
      if (attempt > o.first_attempt) {
        // Every checkpoint event of the attempt that ended must reach the publisher before the
        // next attempt names the checkpoint all nodes resume from.
        const std::string mark = "#sync " + std::to_string(attempt) + "\n";
        if (::write(write_fd, mark.data(), mark.size()) == static_cast<ssize_t>(mark.size())) {
          UniqueMutexLock lock(&sync_marks.mu);
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
          bool timed_out = false;
          while (sync_marks.mark < attempt && !timed_out) {
            timed_out = sync_marks.cv.wait_until(lock.native(), until) == std::cv_status::timeout;
          }
        }
      }
      if (span.open_attempt) span.open_attempt(attempt);
    };
    o.on_start = [&](int attempt, const std::vector<pid_t>&) {
      {
        MutexLock lock(&mu_);
        trouble_.clear();  // a failure reason names the attempt that failed last
      }
      running_attempt = attempt;
    };
  }
  o.env["ANVIL_LOG_LEVEL"] = "warning";
  const std::string dir = job_.job_dir;
  o.log_path = [dir](int rank) { return (fs::path(dir) / ("rank-" + std::to_string(rank) + ".log")).string(); };
  o.log = [id = job_.job_id](const std::string& line) {
    engine_log(LogSeverity::kInfo, absl::StrCat("job ", id, ": ", line));
  };
  // Exit 1 is a job failure rank 0 reported (or a rank's own error): restarting would repeat it.
  o.restartable = [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 1); };
  launch::LaunchResult r;
  // The watcher's end: signalled (not polled) so that the job's end never waits for its sleep.
  struct WatchEnd {
    Mutex mu;
    std::condition_variable cv;
    bool done ABSL_GUARDED_BY(mu) = false;
  } watch_end;
  auto finish_watch = [&] {
    {
      MutexLock lock(&watch_end.mu);
      watch_end.done = true;
    }
    watch_end.cv.notify_all();
  };
  std::thread watcher;
  try {
    launch::RankSupervisor supervisor(o);
    {
      MutexLock lock(&mu_);
      supervisor_ = &supervisor;
      if (stop_signal_ != 0) supervisor.request_stop(stop_signal_);
    }
    if (spread && span.node == 0 && span.trouble) {
      // The other nodes' health, once a second: a node whose replica died leaves node 0's ranks
      // waiting in a collective until its timeout; ending the attempt restarts it at once.
      watcher = std::thread([&] {
        int ended = -1;
        while (true) {
          {
            // A second, or until the run ends.
            UniqueMutexLock lock(&watch_end.mu);
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
            bool timed_out = false;
            while (!watch_end.done && !timed_out) {
              timed_out = watch_end.cv.wait_until(lock.native(), until) == std::cv_status::timeout;
            }
            if (watch_end.done) return;
          }
          const int attempt = running_attempt;
          if (attempt < 0 || attempt == ended) continue;
          const std::string why = span.trouble(attempt);
          if (why.empty()) continue;
          MutexLock lock(&mu_);
          if (stop_signal_ != 0 || supervisor_ == nullptr) continue;
          ended = attempt;
          trouble_ = why;
          engine_log(LogSeverity::kWarning,
                     absl::StrCat("job ", job_.job_id, ": attempt ", attempt, ": ", why, "; restarting the ranks"));
          supervisor_->signal(SIGKILL);
        }
      });
    }
    r = supervisor.run();
    finish_watch();
    if (watcher.joinable()) watcher.join();
    MutexLock lock(&mu_);
    supervisor_ = nullptr;
  } catch (const std::exception& e) {
    finish_watch();
    if (watcher.joinable()) watcher.join();
    MutexLock lock(&mu_);
    supervisor_ = nullptr;
    r.reason = e.what();
  }
  ::close(fds[1]);  // the ranks are gone: the reader sees end of file
  reader.join();

  if (span.node > 0) {
    // A node of another replica's job reports only how its ranks ended.
    WorkerEvent end = base;
    end.kind = r.succeeded ? WorkerEvent::Kind::kSucceeded
               : r.stopped ? WorkerEvent::Kind::kCancelled
                           : WorkerEvent::Kind::kFailed;
    if (!r.succeeded) {
      std::string why = r.reason.empty() ? "the ranks ended without a result" : r.reason;
      if (r.failed_rank >= 0) {
        const std::string last = LastLine(o.log_path(r.failed_rank));
        if (!last.empty()) why += ": " + last;
      }
      end.message = why;
      end.status = absl::AbortedError(why);
    }
    return end;
  }

  if (terminal && (r.succeeded || r.stopped || terminal->kind == WorkerEvent::Kind::kFailed)) return *terminal;
  WorkerEvent end = base;
  int stop_signal;
  {
    MutexLock lock(&mu_);
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
  {
    MutexLock lock(&mu_);
    if (!trouble_.empty()) why = trouble_ + " (last: " + why + ")";
  }
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
