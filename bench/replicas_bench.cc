// Replicas on PostgreSQL against the embedded SQLite default, in one run on one machine.
//
//   submit -> RUNNING   3 replicas on one PostgreSQL; the latency from a SubmitJob's commit
//                       (created_unix_ms) to the job's start on a worker (started_unix_ms),
//                       p50 / p99 over 40 jobs, when the replica that took the submit is
//                       idle (it claims at once) and when it is busy (another replica claims,
//                       woken by NOTIFY)
//   step events / s     the store's append_metric, one writer, SQLite vs PostgreSQL
//   step time           the digits CNN (examples/specs/digits-cnn.json, 8 epochs) on anvild
//                       with each store: the mean step time of its StepMetrics
//   Predict req/s       64 clients round-robin over 1, 2 and 3 replicas (CPU-bound here:
//                       the replicas share this machine's cores; reported, not judged)
//   Predict, one killed  64 clients over 3 anvild processes (the CLI's channel config), one
//                       killed with -9: failed calls and p99 before, during and after
//   spread job          the digits CNN as 2 data-parallel ranks: both in one anvild, and
//                       spread over 2 anvild of --rank-slots 1 (node 1 claimed through the
//                       store, the ranks meeting in PostgreSQL): mean step time and wall
//                       time per step; then 3 anvild, node 1's replica killed with -9: the
//                       time until node 1 of the next attempt runs on another replica, and
//                       until the job is back at the step it was killed at
//
// ANVIL_BENCH_ONLY=spread runs the last table only.
// Usage: anvil_bench_replicas   (needs PostgreSQL 15's binaries: scripts/install-deps.sh test)
//   ANVIL_DATA_DIR   where digits.csv.gz is (default ./data)
//   ANVIL_REPO       the source tree, for examples/specs/digits-cnn.json (default .)
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "bench/digits_cnn_spec.h"
#include "client/target.h"
#include "core/anvil.h"
#include "core/backend/cpu/kernel_info.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "server/server.h"
#include "server/store_postgres.h"
#include "server/store_sqlite.h"
#include "server/wire_tensor.h"
#include "tests/fixtures/postgres_server.h"

namespace fs = std::filesystem;
using namespace anvil;
using Clock = std::chrono::steady_clock;

namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Replica {
  std::unique_ptr<server::AnvilServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Training::Stub> training;
};

Replica Start(const std::string& root, const std::string& store, const std::string& instance,
              const std::string& datasets) {
  server::ServerOptions o;
  o.address = "127.0.0.1:0";
  o.metrics_address = "";
  o.data_dir = root;
  o.datasets_dir = datasets;
  o.store = store;
  o.instance = instance;
  o.devices = "cpu";
  Replica r;
  r.server = std::make_unique<server::AnvilServer>(o);
  r.server->start();
  r.channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(r.server->port()), grpc::InsecureChannelCredentials());
  r.training = v1::Training::NewStub(r.channel);
  return r;
}

v1::Job Submit(Replica& r, const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  const grpc::Status st = r.training->SubmitJob(&ctx, req, &resp);
  if (!st.ok()) throw std::runtime_error("submit: " + st.error_message());
  return resp.job();
}

v1::Job Get(Replica& r, const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  (void)r.training->GetJob(&ctx, req, &job);
  return job;
}

v1::Job WaitFor(Replica& r, const std::string& id, bool started_only) {
  for (int i = 0; i < 60000; ++i) {
    v1::Job job = Get(r, id);
    if (started_only ? job.started_unix_ms() > 0 : (job.state() >= v1::SUCCEEDED && job.state() <= v1::CANCELLED)) {
      return job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(started_only ? 2 : 20));
  }
  throw std::runtime_error("job " + id + " did not get there");
}

v1::JobSpec Blobs(const std::string& name, int epochs) {
  v1::JobSpec s;
  s.set_name(name);
  s.set_model_preset("mlp");
  s.mutable_dataset()->set_name("blobs");
  s.set_epochs(epochs);
  s.set_batch_size(32);
  return s;
}

// Mean step seconds of a job's StepMetrics, from its stream.
double MeanStepSeconds(Replica& r, const std::string& id) {
  grpc::ClientContext ctx;
  v1::StreamMetricsRequest req;
  req.set_job_id(id);
  auto reader = r.training->StreamMetrics(&ctx, req);
  v1::MetricEvent e;
  double sum = 0;
  int n = 0;
  while (reader->Read(&e)) {
    if (e.has_step_metrics()) {
      sum += e.step_metrics().step_seconds();
      ++n;
    }
  }
  return n > 0 ? sum / n : 0;
}

// Predict requests per second with `clients` threads, each its own channel, round-robin over
// `addresses`, for `seconds`.
std::pair<double, double> PredictLoad(const std::vector<std::string>& addresses, int clients, double seconds,
                                      const v1::PredictRequest& request) {
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<std::vector<double>> latencies(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      auto stub = v1::Serving::NewStub(grpc::CreateCustomChannel(addresses[static_cast<size_t>(c) % addresses.size()],
                                                                 grpc::InsecureChannelCredentials(), args));
      while (!stop.load()) {
        const auto t0 = Clock::now();
        grpc::ClientContext ctx;
        v1::PredictResponse resp;
        const grpc::Status st = stub->Predict(&ctx, request, &resp);
        if (measuring.load() && st.ok()) {
          latencies[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  measuring = true;
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  measuring = false;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  for (auto& t : threads) t.join();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  return {static_cast<double>(all.size()) / elapsed, Percentile(all, 0.99)};
}

// An anvild process on a free port; its log in `log`.
struct Process {
  pid_t pid = -1;
  int port = 0;
};
Process Spawn(const std::string& anvild, const std::string& log, std::vector<std::string> args) {
  Process p;
  p.port = FreePort();
  std::fflush(nullptr);  // the child must not flush this process's buffered output a second time
  std::vector<std::string> argv = {anvild, "--address", "127.0.0.1:" + std::to_string(p.port), "--metrics-address", ""};
  argv.insert(argv.end(), args.begin(), args.end());
  p.pid = ::fork();
  if (p.pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen(log.c_str(), "a", stdout);
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(anvild.c_str(), raw.data());
    ::_exit(127);
  }
  return p;
}
Replica Connect(const Process& p) {
  Replica r;
  r.channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(p.port), grpc::InsecureChannelCredentials());
  if (!r.channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
    throw std::runtime_error("anvild on port " + std::to_string(p.port) + " did not start");
  }
  r.training = v1::Training::NewStub(r.channel);
  return r;
}
void Stop(std::vector<Process>& ps) {
  for (Process& p : ps) {
    if (p.pid > 0) ::kill(p.pid, SIGTERM);
  }
  for (Process& p : ps) {
    if (p.pid > 0) ::waitpid(p.pid, nullptr, 0);
    p.pid = -1;
  }
}

// A data-parallel job spread over replicas against one anvild running every rank.
void SpreadJob(const std::string& anvild, const fs::path& root, const std::string& url, const std::string& datasets,
               const v1::JobSpec& cnn) {
  auto common = [&](const std::string& name, const std::string& data) {
    return std::vector<std::string>{"--data-dir",      data,
                                    "--datasets-dir",  datasets,
                                    "--store",         url,
                                    "--instance",      name,
                                    "--devices",       "cpu",
                                    "--lease-seconds", "3",
                                    "--artifacts",     (root / "spread-artifacts").string()};
  };
  v1::JobSpec dp = cnn;
  dp.set_world_size(2);
  dp.mutable_checkpoint()->set_every_steps(20);
  double step[2] = {0, 0}, wall[2] = {0, 0};
  int64_t steps = 0;
  for (int round = 0; round < 2; ++round) {  // alternating, twice
    for (const bool spread : {false, true}) {
      std::vector<Process> ps;
      for (int i = 0; i < (spread ? 2 : 1); ++i) {
        const std::string name = "s" + std::to_string(i);
        std::vector<std::string> args = common(name, (root / ("spread-" + name)).string());
        if (spread) args.insert(args.end(), {"--rank-slots", "1"});
        ps.push_back(Spawn(anvild, (root / (name + ".log")).string(), args));
      }
      Replica r = Connect(ps[0]);
      for (size_t i = 1; i < ps.size(); ++i) Connect(ps[i]);
      dp.set_name(std::string(spread ? "spread-" : "local-") + std::to_string(round));
      const v1::Job job = Submit(r, dp);
      const v1::Job done = WaitFor(r, job.id(), false);
      if (done.state() != v1::SUCCEEDED) throw std::runtime_error("spread bench job: " + done.reason());
      steps = done.step();
      step[spread] += MeanStepSeconds(r, job.id()) / 2;
      wall[spread] += static_cast<double>(done.finished_unix_ms() - done.started_unix_ms()) / 1e3 /
                      static_cast<double>(done.step()) / 2;
      Stop(ps);
    }
  }
  std::printf(
      "\n| digits CNN, 2 data-parallel ranks, 8 epochs (%lld steps) | one anvild (both ranks) | 2 anvild of "
      "--rank-slots 1 | spread / one |\n|---|---|---|---|\n"
      "| StepMetrics step time (ms) | %.2f | %.2f | %.3f |\n"
      "| job wall time / steps (ms) | %.2f | %.2f | %.3f |\n"
      "| job wall time (s) | %.2f | %.2f | %.3f |\n",
      static_cast<long long>(steps), step[0] * 1e3, step[1] * 1e3, step[1] / step[0], wall[0] * 1e3, wall[1] * 1e3,
      wall[1] / wall[0], wall[0] * static_cast<double>(steps), wall[1] * static_cast<double>(steps), wall[1] / wall[0]);

  // Recovery: node 1's replica killed with -9 while a longer job runs.
  server::PostgresStore store(url, {});
  std::vector<Process> ps;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "k" + std::to_string(i);
    std::vector<std::string> args = common(name, (root / ("spread-" + name)).string());
    args.insert(args.end(), {"--rank-slots", "1"});
    ps.push_back(Spawn(anvild, (root / (name + ".log")).string(), args));
  }
  Replica r = Connect(ps[0]);
  Connect(ps[1]);
  Connect(ps[2]);
  dp.set_name("spread-kill");
  dp.set_epochs(40);
  const v1::Job job = Submit(r, dp);
  // Read from the store: any of the three may be the one killed (node 1's replica).
  std::string node1;
  int64_t killed_at = 0;
  for (int i = 0; i < 60000 && killed_at == 0; ++i) {
    const std::optional<server::JobRow> now = store.get_job(job.id());
    const std::vector<server::JobPart> parts = store.parts(job.id(), 0);
    if (now && now->step >= 100 && !parts.empty() && parts[0].state == "running") {
      node1 = parts[0].owner;
      killed_at = now->step;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (node1.empty()) throw std::runtime_error("spread bench: node 1 never ran");
  Process& victim = ps[static_cast<size_t>(node1.back() - '0')];
  const auto t0 = Clock::now();
  ::kill(victim.pid, SIGKILL);
  ::waitpid(victim.pid, nullptr, 0);
  victim.pid = -1;
  double reclaimed_ms = 0, caught_up_ms = 0;
  server::JobState state = server::JobState::kRunning;
  for (int i = 0; i < 120000 && caught_up_ms == 0 && !server::is_terminal(state); ++i) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (reclaimed_ms == 0) {
      const std::vector<server::JobPart> parts = store.parts(job.id(), 0);
      if (!parts.empty() && parts[0].attempt >= 1 && parts[0].state == "running") reclaimed_ms = ms;
    }
    const std::optional<server::JobRow> now = store.get_job(job.id());
    state = now ? now->state : server::JobState::kFailed;
    if (reclaimed_ms > 0 && now && now->step > killed_at) caught_up_ms = ms;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < 120000 && !server::is_terminal(state); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::optional<server::JobRow> now = store.get_job(job.id());
    state = now ? now->state : server::JobState::kFailed;
  }
  Stop(ps);
  std::printf(
      "\n| node 1's replica killed -9 (3 anvild of --rank-slots 1) | killed at step | node 1 of the next attempt "
      "running elsewhere (ms) | back at that step (ms) | job |\n|---|---|---|---|---|\n"
      "| digits CNN, 2 ranks, checkpoint every 20 steps | %lld | %.0f | %.0f | %s |\n",
      static_cast<long long>(killed_at), reclaimed_ms, caught_up_ms, server::job_state_name(state).data());
}

}  // namespace

int main() {
  const char* data_env = std::getenv("ANVIL_DATA_DIR");
  const char* repo_env = std::getenv("ANVIL_REPO");
  const std::string datasets = data_env != nullptr && *data_env != '\0' ? data_env : "data";
  const std::string repo = repo_env != nullptr && *repo_env != '\0' ? repo_env : ".";
  const fs::path root = fs::temp_directory_path() / ("anvil-bench-replicas-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  test::PostgresServer pg;
  // The anvild binary beside this program's build folder: build/bench/.. /server/anvild.
  const std::string anvild =
      (fs::canonical("/proc/self/exe").parent_path().parent_path() / "server" / "anvild").string();
  std::printf("CPU: %s\n\n", cpu_kernel_summary().c_str());
  const char* only = std::getenv("ANVIL_BENCH_ONLY");
  if (only != nullptr && std::string(only) == "spread") {
    v1::JobSpec cnn;
    if (!bench::LoadDigitsCnnSpec(repo, 8, &cnn)) return 1;
    SpreadJob(anvild, root, pg.url(), fs::absolute(datasets).string(), cnn);
    if (std::getenv("ANVIL_BENCH_KEEP") == nullptr) fs::remove_all(root);
    return 0;
  }

  // --- submit -> RUNNING with 3 replicas -------------------------------------------------
  std::vector<double> idle_ms, busy_ms;
  {
    // r1 alone first, so that the long job that keeps it busy later is its own.
    std::vector<Replica> replicas;
    replicas.push_back(Start((root / "shared").string(), pg.url(), "r1", datasets));
    for (int i = 0; i < 40; ++i) {  // every replica idle: the one that took the submit claims
      Replica& r = replicas[0];
      const v1::Job job = Submit(r, Blobs("idle-" + std::to_string(i), 1));
      const v1::Job started = WaitFor(r, job.id(), true);
      idle_ms.push_back(static_cast<double>(started.started_unix_ms() - started.created_unix_ms()));
      WaitFor(r, job.id(), false);
    }
    const v1::Job busy = Submit(replicas[0], Blobs("keeps-r1-busy", 100000));
    WaitFor(replicas[0], busy.id(), true);
    replicas.push_back(Start((root / "shared").string(), pg.url(), "r2", datasets));
    replicas.push_back(Start((root / "shared").string(), pg.url(), "r3", datasets));
    for (int i = 0; i < 40; ++i) {  // r1 busy: r2 or r3 claims, woken by NOTIFY
      const v1::Job job = Submit(replicas[0], Blobs("busy-" + std::to_string(i), 1));
      const v1::Job started = WaitFor(replicas[0], job.id(), true);
      busy_ms.push_back(static_cast<double>(started.started_unix_ms() - started.created_unix_ms()));
      if (std::getenv("ANVIL_BENCH_VERBOSE") != nullptr) {
        std::fprintf(stderr, "busy %d: %.0f ms on %s\n", i, busy_ms.back(), started.replica().c_str());
      }
      WaitFor(replicas[0], job.id(), false);
    }
    grpc::ClientContext ctx;
    v1::CancelJobRequest cancel;
    cancel.set_job_id(busy.id());
    v1::Job cancelled;
    (void)replicas[0].training->CancelJob(&ctx, cancel, &cancelled);
    WaitFor(replicas[0], busy.id(), false);
  }
  std::printf("| submit -> RUNNING, 3 replicas on PostgreSQL | jobs | p50 ms | p99 ms |\n|---|---|---|---|\n");
  std::printf("| the replica that took the submit is idle (claims at once) | %zu | %.1f | %.1f |\n", idle_ms.size(),
              Percentile(idle_ms, 0.5), Percentile(idle_ms, 0.99));
  std::printf("| it is busy: another replica claims, woken by NOTIFY | %zu | %.1f | %.1f |\n\n", busy_ms.size(),
              Percentile(busy_ms, 0.5), Percentile(busy_ms, 0.99));

  // --- step events per second --------------------------------------------------------------
  auto events_per_second = [](server::Store& store) {
    server::JobRow row;
    row.name = "events";
    row.spec_json = "{}";
    row.device = "cpu";
    const std::string id = store.insert_job(row).first.id;
    const std::string payload =
        R"({"job_id":"x","step":"1","step_metrics":{"loss":0.25,"grad_norm":1.5,"lr":0.001,"samples_per_second":9000}})";
    constexpr int kEvents = 3000;
    const auto t0 = Clock::now();
    for (int i = 0; i < kEvents; ++i) store.append_metric({id, 0, i, "step", payload, 0});
    return kEvents / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  double sqlite_eps, pg_eps;
  {
    server::SqliteStore sqlite((root / "events.db").string());
    sqlite_eps = events_per_second(sqlite);
    server::PostgresStore postgres(pg.url(), {});
    pg_eps = events_per_second(postgres);
  }
  std::printf(
      "| step events written / s, one writer | SQLite (WAL, synchronous=NORMAL) | PostgreSQL 15 (events: "
      "synchronous_commit off) | "
      "PostgreSQL / SQLite |\n|---|---|---|---|\n| append_metric | %.0f | %.0f | %.2f |\n\n",
      sqlite_eps, pg_eps, pg_eps / sqlite_eps);

  // --- step time: the digits CNN with each store --------------------------------------------
  v1::JobSpec cnn;
  if (!bench::LoadDigitsCnnSpec(repo, 8, &cnn)) {
    std::fprintf(stderr, "cannot read %s/examples/specs/digits-cnn.json\n", repo.c_str());
    return 1;
  }
  double step_sqlite = 0, step_pg = 0, wall_sqlite = 0, wall_pg = 0;
  for (int round = 0; round < 2; ++round) {  // alternating, twice: both meet the machine alike
    for (const bool postgres : {false, true}) {
      const std::string dir = (root / (postgres ? "cnn-pg" : "cnn-sqlite")).string();
      Replica r = Start(dir, postgres ? pg.url() : "", postgres ? "cnn" : "", datasets);
      cnn.set_name("cnn-" + std::to_string(round));
      const v1::Job job = Submit(r, cnn);
      const v1::Job done = WaitFor(r, job.id(), false);
      if (done.state() != v1::SUCCEEDED) {
        std::fprintf(stderr, "the digits CNN on %s: %s\n", postgres ? "PostgreSQL" : "SQLite", done.reason().c_str());
        return 1;
      }
      (postgres ? step_pg : step_sqlite) += MeanStepSeconds(r, job.id()) / 2;
      // The job's wall time per step: everything the worker's thread did, the store's writes of
      // its events included.
      (postgres ? wall_pg : wall_sqlite) += static_cast<double>(done.finished_unix_ms() - done.started_unix_ms()) /
                                            1e3 / static_cast<double>(done.step()) / 2;
    }
  }
  std::printf(
      "| digits CNN, 8 epochs, mean step | SQLite | PostgreSQL | PostgreSQL / SQLite |\n|---|---|---|---|\n"
      "| StepMetrics step time (ms) | %.2f | %.2f | %.3f |\n"
      "| job wall time / steps (ms) | %.2f | %.2f | %.3f |\n\n",
      step_sqlite * 1e3, step_pg * 1e3, step_pg / step_sqlite, wall_sqlite * 1e3, wall_pg * 1e3, wall_pg / wall_sqlite);

  // --- Predict across 1, 2, 3 replicas ------------------------------------------------------
  {
    std::vector<Replica> replicas;
    for (const char* name : {"p1", "p2", "p3"}) {
      replicas.push_back(Start((root / "shared").string(), pg.url(), name, datasets));
    }
    v1::PredictRequest request;
    request.set_model("idle-0");  // trained above: the blobs MLP, registered in the shared store
    server::encode_tensor(rand({1, 2}), "input", request.add_inputs());
    std::printf("| Predict, 64 clients | replicas | req/s | p99 ms |\n|---|---|---|---|\n");
    for (size_t n = 1; n <= 3; ++n) {
      std::vector<std::string> addresses;
      for (size_t i = 0; i < n; ++i) addresses.push_back("127.0.0.1:" + std::to_string(replicas[i].server->port()));
      const auto [rps, p99] = PredictLoad(addresses, 64, 3.0, request);
      std::printf("| blobs MLP | %zu | %.0f | %.2f |\n", n, rps, p99 / 1e3);
    }
  }

  // --- Predict across 3 anvild processes, one killed with -9 mid-load -------------------------
  // One channel per client over the three addresses (the CLI's config: round_robin, health
  // checks, UNAVAILABLE retried on Predict); p99 in the 3 s before the kill, the 3 s after it,
  // and the 3 s after those.
  {
    std::vector<pid_t> pids;
    std::vector<std::string> addresses;
    for (int i = 0; i < 3; ++i) {
      const std::string log = (root / ("k" + std::to_string(i) + ".log")).string();
      const int port = FreePort();
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid == 0) {
        std::freopen(log.c_str(), "w", stderr);
        std::freopen(log.c_str(), "a", stdout);
        ::execl(anvild.c_str(), anvild.c_str(), "--address", ("127.0.0.1:" + std::to_string(port)).c_str(),
                "--metrics-address", "", "--data-dir", (root / "shared").c_str(), "--store", pg.url().c_str(),
                "--instance", ("k" + std::to_string(i)).c_str(), "--devices", "cpu", nullptr);
        ::_exit(127);
      }
      pids.push_back(pid);
      addresses.push_back("127.0.0.1:" + std::to_string(port));
    }
    std::string list;
    for (const std::string& a : addresses) list += (list.empty() ? "" : ",") + a;
    const client::Target target = client::grpc_target(list);
    v1::PredictRequest request;
    request.set_model("idle-0");
    server::encode_tensor(rand({1, 2}), "input", request.add_inputs());
    constexpr int kClients = 64;
    std::atomic<bool> stop{false};
    const auto t0 = Clock::now();
    struct Sample {
      double at_s, ms;
      bool ok;
    };
    std::vector<std::vector<Sample>> samples(kClients);
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] {
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        args.SetServiceConfigJSON(client::client_service_config());
        auto stub =
            v1::Serving::NewStub(grpc::CreateCustomChannel(target.uri, grpc::InsecureChannelCredentials(), args));
        while (!stop.load()) {
          const auto start = Clock::now();
          grpc::ClientContext ctx;
          ctx.set_wait_for_ready(false);
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
          v1::PredictResponse resp;
          const grpc::Status st = stub->Predict(&ctx, request, &resp);
          const auto end = Clock::now();
          samples[c].push_back({std::chrono::duration<double>(start - t0).count(),
                                std::chrono::duration<double, std::milli>(end - start).count(), st.ok()});
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::seconds(5));  // the replicas start, load the model, warm up
    const double kill_at = std::chrono::duration<double>(Clock::now() - t0).count() + 3;
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ::kill(pids[1], SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(6));
    stop = true;
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < pids.size(); ++i) {
      if (i != 1) ::kill(pids[i], SIGTERM);
      ::waitpid(pids[i], nullptr, 0);
    }
    std::printf(
        "\n| Predict, 64 clients over 3 anvild, one killed -9 | window | calls | failed | p99 ms |\n"
        "|---|---|---|---|---|\n");
    const std::pair<const char*, std::pair<double, double>> windows[] = {
        {"3 s before the kill", {kill_at - 3, kill_at}},
        {"3 s after", {kill_at, kill_at + 3}},
        {"the 3 s after those", {kill_at + 3, kill_at + 6}}};
    for (const auto& [name, span] : windows) {
      std::vector<double> ms;
      int64_t failed = 0;
      for (const auto& per : samples) {
        for (const Sample& x : per) {
          if (x.at_s < span.first || x.at_s >= span.second) continue;
          ms.push_back(x.ms);
          failed += x.ok ? 0 : 1;
        }
      }
      std::printf("| blobs MLP | %s | %zu | %lld | %.2f |\n", name, ms.size(), static_cast<long long>(failed),
                  Percentile(ms, 0.99));
    }
  }
  SpreadJob(anvild, root, pg.url(), fs::absolute(datasets).string(), cnn);
  fs::remove_all(root);
  return 0;
}
