// The artifact store's engines side by side, in one run on one machine.
//
//   objects        publish (to the store) and fetch (back to a local file) of 1 MiB and 64 MiB
//                  objects: the folder engine with the source on the same filesystem (a hard
//                  link) and on another (a copy), and the S3 engine against moto's server on
//                  loopback; with SHA-256 alone as the floor every engine pays (each object's
//                  digest is computed on publish and checked on fetch)
//   training       the digits CNN (8 epochs, a checkpoint every 50 steps, each one published)
//                  on anvild with its artifacts in the data dir and in S3: job wall time per
//                  step, and the ratio
//
// moto is a test double written in Python, not a production object store: its numbers bound
// what the S3 engine's own work costs from above, they do not measure S3.
//
// Usage: anvil_bench_artifacts   (moto[server] in ANVIL_REPO/.venv: scripts/install-test-peers.sh)
//   ANVIL_DATA_DIR   where the built-in datasets are (default ./data)
//   ANVIL_REPO       the source tree (default .)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "bench/digits_cnn_spec.h"
#include "core/anvil.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/util/sha256.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "server/artifacts/digest.h"
#include "server/artifacts/file_artifacts.h"
#include "server/artifacts/s3_artifacts.h"
#include "server/server.h"
#include "tests/fixtures/s3_server.h"

namespace fs = std::filesystem;
using namespace anvil;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// The median of three runs of f, in seconds.
template <class F>
double Median3(F&& f) {
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    f(i);
    t.push_back(Seconds(start));
  }
  std::sort(t.begin(), t.end());
  return t[1];
}

void WriteRandom(const std::string& path, size_t bytes) {
  std::mt19937_64 rng(7);
  std::string data(bytes, '\0');
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  std::ofstream(path, std::ios::binary) << data;
}

struct Job {
  double wall_per_step_ms = 0;
  int64_t checkpoints = 0;
};

Job TrainDigits(const v1::JobSpec& spec, const std::string& data_dir, const std::string& datasets,
                const std::string& artifacts, const std::string& endpoint) {
  server::ServerOptions o;
  o.address = "127.0.0.1:0";
  o.metrics_address = "";
  o.data_dir = data_dir;
  o.datasets_dir = datasets;
  o.devices = "cpu";
  o.artifacts = artifacts;
  o.s3_endpoint = endpoint;
  server::AnvilServer server(o);
  server.start();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  auto training = v1::Training::NewStub(channel);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  {
    grpc::ClientContext ctx;
    if (!training->SubmitJob(&ctx, req, &resp).ok()) throw std::runtime_error("submit failed");
  }
  v1::Job job;
  for (;;) {
    grpc::ClientContext ctx;
    v1::GetJobRequest get;
    get.set_job_id(resp.job().id());
    (void)training->GetJob(&ctx, get, &job);
    if (job.state() >= v1::SUCCEEDED && job.state() <= v1::CANCELLED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (job.state() != v1::SUCCEEDED) throw std::runtime_error("the digits CNN: " + job.reason());
  Job out;
  out.wall_per_step_ms =
      static_cast<double>(job.finished_unix_ms() - job.started_unix_ms()) / static_cast<double>(job.step());
  out.checkpoints = job.step() / spec.checkpoint().every_steps();
  server.shutdown(std::chrono::seconds(10));
  return out;
}

}  // namespace

int main() {
  const std::string repo = std::getenv("ANVIL_REPO") != nullptr ? std::getenv("ANVIL_REPO") : ".";
  const std::string datasets =
      fs::absolute(std::getenv("ANVIL_DATA_DIR") != nullptr ? std::getenv("ANVIL_DATA_DIR") : "data").string();
  const std::string python = fs::absolute(repo + "/.venv/bin/python").string();
  if (!test::S3Server::Available(python)) {
    std::fprintf(stderr, "no moto server in %s (scripts/install-test-peers.sh)\n", python.c_str());
    return 1;
  }
  char tmpl[] = "/tmp/anvil-bench-artifacts-XXXXXX";
  const fs::path root = ::mkdtemp(tmpl);
  test::S3Server::Options so;
  so.python = python;
  test::S3Server s3(so);
  ::setenv("AWS_ACCESS_KEY_ID", "bench", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "bench", 1);
  std::printf("CPU: %s\n\n", cpu_kernel_summary().c_str());

  // --- objects ------------------------------------------------------------------------------
  server::FileArtifactStore folder((root / "folder").string());
  server::S3Location where;
  where.endpoint = s3.endpoint();
  where.bucket = s3.bucket();
  where.prefix = "bench/";
  where.access_key = where.secret_key = "bench";
  server::S3ArtifactStore bucket(where);
  // /dev/shm is another filesystem than /tmp's here: the folder engine copies from it.
  const fs::path other_fs = fs::exists("/dev/shm") ? fs::path("/dev/shm") : root;
  std::printf("| object | engine | publish MB/s | fetch MB/s |\n|---|---|---|---|\n");
  for (const size_t mib : {size_t{1}, size_t{64}}) {
    const size_t bytes = mib << 20;
    const std::string same = (root / ("src-" + std::to_string(mib))).string();
    const std::string away = (other_fs / ("anvil-bench-src-" + std::to_string(mib))).string();
    WriteRandom(same, bytes);
    WriteRandom(away, bytes);
    const double mb = static_cast<double>(bytes) / 1e6;
    const double sha = Median3([&](int) { (void)server::sha256_file(same); });
    const double engine_sha = Median3([&](int) { (void)sha256_file_hex(same); });
    std::printf("| %zu MiB | SHA-256 of the file alone, the engine's own (core/util/sha256.h) | %.0f | %.0f |\n", mib,
                mb / engine_sha, mb / engine_sha);
    std::printf("| %zu MiB | SHA-256 of the file alone, OpenSSL (the floor) | %.0f | %.0f |\n", mib, mb / sha,
                mb / sha);
    struct Engine {
      const char* name;
      server::ArtifactStore* store;
      std::string source;
    };
    for (const Engine& e :
         {Engine{"folder, same filesystem (hard link)", &folder, same},
          Engine{"folder, another filesystem (copy)", &folder, away}, Engine{"S3 (moto on loopback)", &bucket, same}}) {
      static int n = 0;
      const int run = ++n;
      const std::string tag = std::to_string(run);
      const double publish = Median3(
          [&](int i) { e.store->publish("o/" + std::to_string(run) + "-" + std::to_string(i) + ".bin", e.source); });
      const double fetch = Median3([&](int i) {
        e.store->fetch_to("o/" + std::to_string(run) + "-" + std::to_string(i) + ".bin",
                          (root / ("fetched-" + tag)).string());
      });
      std::printf("| %zu MiB | %s | %.0f | %.0f |\n", mib, e.name, mb / publish, mb / fetch);
    }
    fs::remove(away);
  }
  std::printf("\n");

  // --- training with its checkpoints published ----------------------------------------------
  v1::JobSpec cnn;
  if (!bench::LoadDigitsCnnSpec(repo, 8, &cnn)) {
    std::fprintf(stderr, "cannot read %s/examples/specs/digits-cnn.json\n", repo.c_str());
    return 1;
  }
  cnn.mutable_checkpoint()->set_every_steps(50);
  double local = 0, remote = 0;
  int64_t checkpoints = 0;
  for (int round = 0; round < 2; ++round) {  // alternating, twice: both meet the machine alike
    cnn.set_name("cnn-" + std::to_string(round));
    local +=
        TrainDigits(cnn, (root / ("cnn-local-" + std::to_string(round))).string(), datasets, "", "").wall_per_step_ms /
        2;
    const Job j = TrainDigits(cnn, (root / ("cnn-s3-" + std::to_string(round))).string(), datasets,
                              "s3://" + s3.bucket() + "/cnn-" + std::to_string(round), s3.endpoint());
    remote += j.wall_per_step_ms / 2;
    checkpoints = j.checkpoints;
  }
  std::printf(
      "| digits CNN, 8 epochs, a checkpoint every 50 steps (%lld published) | data dir | S3 (moto) | S3 / data dir "
      "|\n|---|---|---|---|\n| job wall time / steps (ms) | %.3f | %.3f | %.3f |\n",
      static_cast<long long>(checkpoints), local, remote, remote / local);
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
