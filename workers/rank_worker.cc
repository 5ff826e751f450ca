// A data-parallel rank in a child process of anvild: see rank_worker.h.
#include "workers/rank_worker.h"

#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/distributed/ddp.h"
#include "core/distributed/environment.h"
#include "core/util/file.h"
#include "workers/job_plan.h"
#include "workers/job_steps.h"
#include "workers/pg_rendezvous.h"
#include "workers/rank_events.h"
#include "workers/status.h"

namespace anvil::workers {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_stop{false}, g_interrupt{false};

void OnSignal(int sig) {
  if (sig == SIGTERM) g_interrupt = true;
  g_stop = true;
}

// Rank 0's event pipe (ANVIL_EVENT_FD); other ranks send nothing.
class EventPipe {
 public:
  EventPipe() {
    if (const char* v = std::getenv("ANVIL_EVENT_FD")) fd_ = std::atoi(v);
  }
  void send(const WorkerEvent& e) {
    if (fd_ < 0) return;
    const std::string line = encode_rank_event(e) + "\n";
    size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // anvild went away: the rank dies with it (PR_SET_PDEATHSIG)
      off += static_cast<size_t>(n);
    }
  }

 private:
  int fd_ = -1;
};

RunJob ReadJob(const std::string& path) {
  std::ifstream in(path);
  ANVIL_CHECK(in.good(), "rank worker: cannot read ", path);
  const nlohmann::json j = nlohmann::json::parse(in);
  RunJob job;
  job.job_id = j.at("job_id").get<std::string>();
  job.data_root = j.at("data_root").get<std::string>();
  job.datasets_dir = j.at("datasets_dir").get<std::string>();
  job.job_dir = j.at("job_dir").get<std::string>();
  job.resume = j.at("resume").get<bool>();
  job.memory_budget = j.at("memory_budget").get<int64_t>();
  const auto parsed = google::protobuf::util::JsonStringToMessage(j.at("spec").get<std::string>(), &job.spec);
  ANVIL_CHECK(parsed.ok(), "rank worker: the job's spec in ", path, " is unreadable: ", parsed.ToString());
  return job;
}

}  // namespace

void write_rank_job(const std::string& path, const RunJob& job) {
  std::string spec;
  const auto printed = google::protobuf::util::MessageToJsonString(job.spec, &spec);
  ANVIL_CHECK(printed.ok(), "rank job: ", printed.ToString());
  const nlohmann::json j = {{"job_id", job.job_id},
                            {"data_root", job.data_root},
                            {"datasets_dir", job.datasets_dir},
                            {"job_dir", job.job_dir},
                            {"resume", job.resume},
                            {"memory_budget", job.memory_budget},
                            {"spec", spec}};
  write_file_atomic(path, j.dump(2));
}

int run_rank_worker(const std::string& job_file) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  EventPipe events;
  WorkerEvent base;
  int rank = -1;
  // A failure a restart would repeat: rank 0 reports it, every rank exits 1 (rank_group.h).
  auto fail = [&](absl::Status why) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(why.message()).c_str());
    events.send(failed_event(base, std::move(why)));
    return 1;
  };
  try {
    const RunJob job = ReadJob(job_file);
    base.job_id = job.job_id;
    // Ranks on several replicas meet in the job store (ANVIL_RDZV_URL=postgresql://...).
    register_postgres_rendezvous();
    distributed::RankEnvironment env = distributed::RankEnvironment::from_env();
    rank = env.rank;
    std::fprintf(stderr, "%s\n", env.describe().c_str());
    std::shared_ptr<distributed::ProcessGroup> group = distributed::init_process_group(env);
    const std::string checkpoint = (fs::path(job.job_dir) / "checkpoint.safetensors").string();
    PlanPaths paths{job.data_root, job.datasets_dir, checkpoint, kCPU, job.memory_budget};
    paths.world_size = env.world_size;
    paths.rank = env.rank;
    JobPlan plan = make_job_plan(job.spec, paths);
    train::Trainer trainer(plan.model.module, plan.optimizer, plan.options, plan.loss);
    if (plan.scheduler) trainer.set_scheduler(plan.scheduler);
    trainer.set_data_parallel(std::make_shared<distributed::DistributedDataParallel>(plan.model.module, group));
    data::DataLoader train_loader(plan.train_set, plan.train_loader);
    data::DataLoader val_loader(plan.val_set, plan.val_loader);
    std::string resumed_note;
    // A restarted attempt always resumes: the checkpoint is the only state the ranks share.
    if (job.resume || env.attempt > 0) {
      absl::StatusOr<std::string> resumed =
          resume_from_checkpoints(trainer, train_loader, checkpoint, plan.options.checkpoint_keep);
      if (!resumed.ok()) return fail(resumed.status());
      resumed_note = *resumed;
    }
    WorkerEvent started = base;
    started.kind = WorkerEvent::Kind::kStarted;
    started.message = "cpu";  // the worker's device: the ranks are its children (spec.world_size says how many)
    started.step = trainer.step();
    started.total_steps = plan.total_steps;
    started.detail = resumed_note.empty() && env.attempt > 0 ? "restart " + std::to_string(env.attempt) +
                                                                   ": resumed at step " + std::to_string(trainer.step())
                                                             : resumed_note;
    events.send(started);
    const auto send = [&](const WorkerEvent& e) { events.send(e); };
    // The doctor runs on rank 0, which holds every rank's numbers after each metric read (a
    // straggler, the slowest loader). It reports without acting: an action would have to be
    // taken by every rank at the same step (the spec refuses doctor actions here).
    std::shared_ptr<train::Doctor> doctor = env.rank == 0 ? make_doctor(job.spec, kCPU) : nullptr;
    if (doctor && trainer.step() > 0) doctor->set_resumed();
    if (doctor && trainer.step() == 0 && env.attempt == 0) check_first_batch(*doctor, plan, base, send);
    trainer.set_callbacks(event_callbacks(base, plan.total_steps, send, doctor));
    const train::TrainResult r = trainer.fit(train_loader, &val_loader, &g_stop);
    if (r.status == train::TrainResult::Status::kCancelled) {
      // Every rank: the interrupt checkpoint's agreement check is a collective.
      events.send(stopped_event(base, trainer, train_loader, r, g_interrupt.load()));
      return 0;
    }
    events.send(succeeded_event(base, job, plan, trainer, val_loader, r, /*write_archive=*/env.rank == 0));
    return 0;
  } catch (const distributed::CollectiveError& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return kRankRestartable;
  } catch (const std::bad_alloc&) {
    return fail(absl::ResourceExhaustedError("out of memory (try a smaller batch_size or model)"));
  } catch (...) {
    return fail(engine_exception_status());
  }
}

}  // namespace anvil::workers
