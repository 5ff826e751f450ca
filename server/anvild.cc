// anvild: the Anvil server. Trains jobs on its device workers and serves the resulting models.
//
//   anvild [--address 127.0.0.1:50051] [--data-dir ./anvil-data] [--config anvild.json] ...
//
// Settings come from (later wins) built-in defaults, the JSON config file, the environment
// (ANVILD_ADDRESS, ANVILD_DATA_DIR, ANVILD_DATASETS_DIR, ANVILD_LOG_LEVEL, ANVILD_DEVICES,
// ANVILD_SERVING_DEVICE, ANVILD_TLS_CERT, ANVILD_TLS_KEY, ANVILD_TLS_CLIENT_CA, ANVILD_TOKENS) and
// the flags.
// SIGTERM / SIGINT drain: running jobs are checkpointed and resume on the next start; calls
// already admitted finish, new ones get UNAVAILABLE.
// Security (docs/security.md): a non-loopback address needs TLS or tokens (or --insecure);
// reflection only with --reflection.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/backend/kernel_report.h"
#include "core/util/log.h"
#include "server/log.h"
#include "server/server.h"
#include "workers/rank_worker.h"

using namespace anvil::server;

namespace {

// "8G", "512M", "64k" or a byte count; "0" = no limit.
int64_t ParseBytes(const std::string& text, const char* flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "k" || unit == "K" || unit == "KiB")
    scale = 1024.0;
  else if (unit == "m" || unit == "M" || unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "G" || unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "T" || unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    used = 0;
  if (used == 0 || v < 0) {
    throw anvil::Error(std::string(flag) + ": expected a size such as 8G, 512M or a byte count, got \"" + text + "\"");
  }
  return static_cast<int64_t>(v * scale);
}

void ApplyConfigFile(const std::string& path, ServerOptions& o, std::string& log_level) {
  std::ifstream in(path);
  if (!in) throw anvil::Error("--config: cannot read \"" + path + "\"");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw anvil::Error("--config " + path + ": not valid JSON: " + e.what());
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "address")
      o.address = value.get<std::string>();
    else if (key == "data_dir")
      o.data_dir = value.get<std::string>();
    else if (key == "store")
      o.store = value.get<std::string>();
    else if (key == "instance")
      o.instance = value.get<std::string>();
    else if (key == "artifacts")
      o.artifacts = value.get<std::string>();
    else if (key == "s3_endpoint")
      o.s3_endpoint = value.get<std::string>();
    else if (key == "rank_slots")
      o.rank_slots = value.get<int>();
    else if (key == "rank_ifname")
      o.rank_ifname = value.get<std::string>();
    else if (key == "metrics_address")
      o.metrics_address = value.get<std::string>();
    else if (key == "datasets_dir")
      o.datasets_dir = value.get<std::string>();
    else if (key == "devices")
      o.devices = value.get<std::string>();
    else if (key == "serving_device")
      o.serving_device = value.get<std::string>();
    else if (key == "log_level")
      log_level = value.get<std::string>();
    else if (key == "max_batch")
      o.batching.max_batch = value.get<int64_t>();
    else if (key == "max_delay_us")
      o.batching.max_delay = std::chrono::microseconds(value.get<int64_t>());
    else if (key == "batching")
      o.batching.enabled = value.get<bool>();
    else if (key == "max_queue")
      o.batching.max_queue = value.get<size_t>();
    else if (key == "max_import_mb")
      o.max_import_bytes = value.get<int64_t>() << 20;
    else if (key == "max_pending_jobs")
      o.max_pending_jobs = value.get<int64_t>();
    else if (key == "max_loaded_models")
      o.max_loaded_models = value.get<size_t>();
    else if (key == "max_predict_message_mb" || key == "max_message_mb") {
      o.limits.predict_message_bytes = value.get<int64_t>() << 20;
    } else if (key == "max_training_message_mb")
      o.limits.training_message_bytes = value.get<int64_t>() << 20;
    else if (key == "max_concurrent_predicts")
      o.limits.max_concurrent_predicts = value.get<int>();
    else if (key == "reflection")
      o.reflection = value.get<bool>();
    else if (key == "max_job_memory")
      o.max_job_memory = ParseBytes(value.get<std::string>(), "max_job_memory");
    else if (key == "max_predict_memory")
      o.max_predict_memory = ParseBytes(value.get<std::string>(), "max_predict_memory");
    else if (key == "max_model_memory")
      o.max_model_memory = ParseBytes(value.get<std::string>(), "max_model_memory");
    else if (key == "max_crash_resumes")
      o.max_crash_resumes = value.get<int>();
    else if (key == "max_finished_jobs")
      o.max_finished_jobs = value.get<int64_t>();
    else if (key == "job_retention_days")
      o.job_retention = std::chrono::hours(24 * value.get<int64_t>());
    else if (key == "tls_cert")
      o.tls_cert = value.get<std::string>();
    else if (key == "tls_key")
      o.tls_key = value.get<std::string>();
    else if (key == "tls_client_ca")
      o.tls_client_ca = value.get<std::string>();
    else if (key == "tokens")
      o.tokens_file = value.get<std::string>();
    else if (key == "insecure")
      o.insecure = value.get<bool>();
    else
      throw anvil::Error("--config " + path + ": unknown setting \"" + key + "\"");
  }
}

// SIGTERM / SIGINT reach a waiting thread through a pipe: the handler only writes the signal
// number (async-signal-safe), whichever thread it interrupts. (Masking the signals and using
// sigwait would miss threads started before main, such as OpenBLAS's.)
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &b, 1);
}

void InstallSignalPipe() {
  if (::pipe(g_signal_pipe) != 0) throw anvil::Error("anvild: pipe() failed");
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int WaitForSignal() {
  unsigned char b = 0;
  while (::read(g_signal_pipe[0], &b, 1) < 0 && errno == EINTR) {
  }
  return b;
}

// Each connection holds an fd: the soft limit (often 1024) is raised to the hard one, and the
// hard one to 65536 where the process may (root). `wanted` > 0 sets the soft limit instead
// (also lower: the fault suite floods a small table).
void SetOpenFileLimit(int64_t wanted) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  if (wanted <= 0) {
    if (r.rlim_max != RLIM_INFINITY && r.rlim_max < 65536) {
      rlimit raised{65536, 65536};
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
    }
    r.rlim_cur = r.rlim_max;
  } else {
    r.rlim_cur = std::min<rlim_t>(static_cast<rlim_t>(wanted), r.rlim_max);
  }
  ::setrlimit(RLIMIT_NOFILE, &r);
  ::getrlimit(RLIMIT_NOFILE, &r);
  log(LogLevel::kInfo, "open files: up to ", static_cast<int64_t>(r.rlim_cur), " (hard limit ",
      r.rlim_max == RLIM_INFINITY ? std::string("none") : std::to_string(r.rlim_max), ")");
}

void FromEnv(const char* name, std::string& target) {
  if (const char* v = std::getenv(name); v != nullptr && *v != '\0') target = v;
}

}  // namespace

int main(int argc, char** argv) {
  // A data-parallel job's rank: a child anvild started by its CPU worker (workers/rank_group.h).
  if (argc == 3 && std::string(argv[1]) == "--rank-worker") return anvil::workers::run_rank_worker(argv[2]);
  ServerOptions o;
  std::string config, log_level = "info";
  int64_t max_delay_us = -1, max_batch = -1;
  bool no_batching = false;
  CLI::App app{"anvild: the Anvil training and serving server"};
  app.add_option(
      "--config", config,
      "JSON settings file (keys: address, data_dir, store, instance, artifacts, s3_endpoint, rank_slots, rank_ifname, "
      "datasets_dir, log_level, "
      "max_batch, "
      "max_delay_us, batching, max_queue, max_pending_jobs, max_loaded_models, max_import_mb, max_predict_message_mb, "
      "max_training_message_mb, max_concurrent_predicts, reflection, max_job_memory, max_predict_memory, "
      "max_model_memory, "
      "max_crash_resumes, "
      "devices, "
      "serving_device)");
  std::string address, data_dir, datasets_dir, level_flag;
  app.add_option("--address", address, "gRPC listen address (default 127.0.0.1:50051; port 0 picks a free one)");
  std::string metrics_address = "127.0.0.1:9464";
  app.add_option("--metrics-address", metrics_address,
                 "Prometheus /metrics over HTTP (default 127.0.0.1:9464; \"\" turns it off)");
  app.add_option("--data-dir", data_dir, "jobs, models and the job store live here (default ./anvil-data)");
  std::string store, instance;
  double lease_seconds = -1;
  app.add_option("--instance", instance,
                 "this replica's name in a shared store (default HOSTNAME-PID; a stable name lets a restarted "
                 "replica resume its jobs at once)");
  app.add_option("--lease-seconds", lease_seconds,
                 "replicas: the lease a running job is held under (default 15; another replica takes the job over "
                 "2 s after it lapses)");
  double stalled_minutes = -1;
  app.add_option("--stalled-after-minutes", stalled_minutes,
                 "the training doctor's STALLED finding: a running job with no step, epoch or checkpoint for this "
                 "long (default 30; 0 turns the watchdog off)");
  app.add_option("--store", store,
                 "the job store: a postgresql://user@host:port/db URL (libpq's; ?sslmode=verify-full for TLS), or "
                 "a SQLite file (default <data-dir>/anvil.db)");
  std::string artifacts, s3_endpoint;
  app.add_option("--artifacts", artifacts,
                 "where checkpoints and model archives live: a folder every replica mounts, or s3://BUCKET[/PREFIX] "
                 "(credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; default: the data dir)");
  app.add_option("--s3-endpoint", s3_endpoint,
                 "the S3-compatible server of --artifacts s3://... (default $AWS_ENDPOINT_URL, else AWS S3 of "
                 "$AWS_REGION)");
  int rank_slots = -1;
  std::string rank_ifname;
  app.add_option("--rank-slots", rank_slots,
                 "replicas: ranks of one data-parallel job run here; a job of more ranks runs as nodes on several "
                 "replicas (default 0: every rank of a job here)");
  app.add_option("--rank-ifname", rank_ifname,
                 "replicas: the network interface the ranks of a job's nodes reach each other on (default lo)");
  app.add_option("--datasets-dir", datasets_dir, "built-in dataset files (default $ANVIL_DATA_DIR or ./data)");
  app.add_option("--log-level", level_flag, "debug, info, warning or error");
  std::string devices, serving_device;
  app.add_option("--devices", devices,
                 "training workers: \"auto\" (every CUDA device plus the CPU; the default) or a list like cuda:0,cpu");
  int cpu_workers = 0;
  app.add_option("--cpu-workers", cpu_workers,
                 "training jobs that run at once on the CPU, sharing its cores (default 1)");
  app.add_option("--serving-device", serving_device,
                 "where served models run: \"auto\" (cuda:0 when there is a GPU; the default), cpu or cuda:N");
  app.add_option("--max-batch", max_batch, "dynamic batching: rows per batch (default 32)");
  app.add_option(
      "--max-delay-us", max_delay_us,
      "dynamic batching: extra wait for more rows (default 0: batch whatever queued while the model was busy)");
  app.add_flag("--no-batching", no_batching, "run every Predict on its own");
  int64_t predict_mb = -1, training_mb = -1;
  int concurrent_predicts = -1;
  app.add_option("--max-predict-message-mb", predict_mb, "largest PredictRequest in MiB (default 64)");
  app.add_option("--max-training-message-mb", training_mb, "largest Training request (a job spec) in MiB (default 4)");
  app.add_option("--max-concurrent-predicts", concurrent_predicts,
                 "Predicts running at once (default 64; up to 1024 more wait, beyond that RESOURCE_EXHAUSTED)");
  int64_t max_finished_jobs = -1, job_retention_days = -1;
  app.add_option("--max-finished-jobs", max_finished_jobs,
                 "finished jobs kept with their metric history and files, newest first (default 10000; 0: all); "
                 "models they registered stay");
  app.add_option("--job-retention-days", job_retention_days,
                 "delete finished jobs (not their models) this many days after they ended (default 0: keep)");
  bool reflection = false;
  app.add_flag("--reflection", reflection, "serve gRPC reflection (the whole schema, to any client; default off)");
  std::string max_job_memory;
  app.add_option("--max-job-memory", max_job_memory,
                 "memory one job may need, estimated from its spec before it is queued: 8G, 512M, ... (default: half "
                 "of what the process may use; 0: no limit)");
  std::string max_predict_memory, max_model_memory;
  app.add_option("--max-model-memory", max_model_memory,
                 "bytes of loaded models' weights (their archives) kept for serving, e.g. 8G (the default); past "
                 "it the least recently used versions are unloaded and reload on their next use; 0: no bound");
  app.add_option("--max-predict-memory", max_predict_memory,
                 "tensors the Predicts in flight may hold at once, all models together: 4G, 512M, ... (default: 4G, "
                 "or the job memory budget when smaller; 0: no limit); beyond it requests get RESOURCE_EXHAUSTED");
  int max_crash_resumes = -1;
  app.add_option("--max-crash-resumes", max_crash_resumes,
                 "resumes of a job the server died under before it is FAILED (default 2)");
  std::string tls_cert, tls_key, tls_client_ca, tokens_file;
  app.add_option("--tls-cert", tls_cert, "TLS: the server's certificate chain (PEM)");
  app.add_option("--tls-key", tls_key, "TLS: the server's private key (PEM)");
  app.add_option("--tls-client-ca", tls_client_ca,
                 "mutual TLS: accept only clients with a certificate signed by this CA (PEM)");
  app.add_option("--tokens", tokens_file,
                 "bearer-token file (default <data-dir>/tokens.json; `anvil token create` adds tokens; tokens in it "
                 "turn authentication on)");
  bool insecure = false;
  app.add_flag("--insecure", insecure, "allow a non-loopback address with neither TLS nor tokens");
  int64_t max_open_files = 0;
  app.add_option("--max-open-files", max_open_files,
                 "the fd limit (each connection holds one; default: as high as the process may)");
  bool repair = false;
  app.add_flag("--repair", repair,
               "report what is wrong with the data dir's job store and what to do; changes nothing");
  CLI11_PARSE(app, argc, argv);

  try {
    o.metrics_address = metrics_address;
    if (!config.empty()) ApplyConfigFile(config, o, log_level);
    FromEnv("ANVILD_METRICS_ADDRESS", o.metrics_address);
    if (app.count("--metrics-address") > 0) o.metrics_address = metrics_address;
    FromEnv("ANVILD_ADDRESS", o.address);
    FromEnv("ANVILD_DATA_DIR", o.data_dir);
    FromEnv("ANVILD_STORE", o.store);
    FromEnv("ANVILD_INSTANCE", o.instance);
    FromEnv("ANVILD_ARTIFACTS", o.artifacts);
    FromEnv("ANVILD_DATASETS_DIR", o.datasets_dir);
    FromEnv("ANVILD_DEVICES", o.devices);
    FromEnv("ANVILD_SERVING_DEVICE", o.serving_device);
    FromEnv("ANVILD_LOG_LEVEL", log_level);
    FromEnv("ANVILD_TLS_CERT", o.tls_cert);
    FromEnv("ANVILD_TLS_KEY", o.tls_key);
    FromEnv("ANVILD_TLS_CLIENT_CA", o.tls_client_ca);
    FromEnv("ANVILD_TOKENS", o.tokens_file);
    if (!address.empty()) o.address = address;
    if (!data_dir.empty()) o.data_dir = data_dir;
    if (!store.empty()) o.store = store;
    if (!instance.empty()) o.instance = instance;
    if (!artifacts.empty()) o.artifacts = artifacts;
    if (!s3_endpoint.empty()) o.s3_endpoint = s3_endpoint;
    if (rank_slots >= 0) o.rank_slots = rank_slots;
    if (!rank_ifname.empty()) o.rank_ifname = rank_ifname;
    if (cpu_workers > 0) o.cpu_workers = cpu_workers;
    if (lease_seconds > 0) o.lease = std::chrono::milliseconds(static_cast<int64_t>(lease_seconds * 1000));
    if (stalled_minutes >= 0)
      o.stalled_after = std::chrono::milliseconds(static_cast<int64_t>(stalled_minutes * 60 * 1000));
    if (!datasets_dir.empty()) o.datasets_dir = datasets_dir;
    if (!devices.empty()) o.devices = devices;
    if (!serving_device.empty()) o.serving_device = serving_device;
    if (!level_flag.empty()) log_level = level_flag;
    if (max_batch > 0) o.batching.max_batch = max_batch;
    if (max_delay_us >= 0) o.batching.max_delay = std::chrono::microseconds(max_delay_us);
    if (no_batching) o.batching.enabled = false;
    if (predict_mb > 0) o.limits.predict_message_bytes = predict_mb << 20;
    if (training_mb > 0) o.limits.training_message_bytes = training_mb << 20;
    if (concurrent_predicts > 0) o.limits.max_concurrent_predicts = concurrent_predicts;
    if (reflection) o.reflection = true;
    if (max_finished_jobs >= 0) o.max_finished_jobs = max_finished_jobs;
    if (job_retention_days >= 0) o.job_retention = std::chrono::hours(24 * job_retention_days);
    if (!tls_cert.empty()) o.tls_cert = tls_cert;
    if (!tls_key.empty()) o.tls_key = tls_key;
    if (!tls_client_ca.empty()) o.tls_client_ca = tls_client_ca;
    if (!tokens_file.empty()) o.tokens_file = tokens_file;
    if (insecure) o.insecure = true;
    if (!max_job_memory.empty()) o.max_job_memory = ParseBytes(max_job_memory, "--max-job-memory");
    if (!max_predict_memory.empty()) o.max_predict_memory = ParseBytes(max_predict_memory, "--max-predict-memory");
    if (!max_model_memory.empty()) o.max_model_memory = ParseBytes(max_model_memory, "--max-model-memory");
    if (max_crash_resumes >= 0) o.max_crash_resumes = max_crash_resumes;
    if (repair) {
      std::fputs(AnvilServer::repair_report(o.data_dir).c_str(), stdout);
      return 0;
    }
    set_log_level(parse_log_level(log_level));
    // The engine's lines (the CPU and kernels at start) go through this log.
    anvil::set_log_sink([](anvil::LogSeverity severity, const std::string& message) {
      log(static_cast<LogLevel>(static_cast<int>(severity)), message);
    });
    anvil::log_kernel_summary_once();

    SetOpenFileLimit(max_open_files);
    InstallSignalPipe();
    AnvilServer server(o);
    server.start();
    log(LogLevel::kInfo, "anvild listening on ", o.address.substr(0, o.address.rfind(':')), ":", server.port(),
        " (data dir ", o.data_dir, ", batching ", o.batching.enabled ? "on" : "off", ")");
    if (server.metrics_port() > 0) {
      log(LogLevel::kInfo, "metrics on http://", o.metrics_address.substr(0, o.metrics_address.rfind(':')), ":",
          server.metrics_port(), "/metrics");
    }
    std::thread waiter([&] {
      const int sig = WaitForSignal();
      log(LogLevel::kInfo, "signal ", sig == SIGTERM ? "SIGTERM" : "SIGINT", ": draining");
      server.shutdown();
    });
    server.wait();
    waiter.join();
    log(LogLevel::kInfo, "anvild stopped");
    return 0;
  } catch (const std::exception& e) {
    log(LogLevel::kError, "anvild: ", e.what());
    return 1;
  }
}
