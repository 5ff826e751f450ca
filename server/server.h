// anvild's core: the store, metrics hub, model registry, scheduler with its workers, and the
// gRPC services, health and reflection, assembled and run in one object. Tests start it
// in-process on 127.0.0.1:0; the anvild binary adds flags, logging and signals.
//
// Thread-safety: start() from one controlling thread; then the accessors (ports, options,
// connections) and wait() from any thread; shutdown() from any thread, once (it is idempotent:
// later calls return at once).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "server/batcher.h"
#include "server/request_limits.h"

namespace anvil::server {

struct ServerOptions {
  std::string address = "127.0.0.1:50051";
  std::string metrics_address;          // Prometheus /metrics over HTTP ("127.0.0.1:9464"); "" = off
  std::string data_dir = "anvil-data";  // made absolute at start; created when missing
  std::string datasets_dir;             // built-in dataset files; default: data::default_data_dir()
  // Workers: "auto" = one per CUDA device plus the CPU; or a list such as "cuda:0,cpu".
  std::string devices = "auto";
  // Training workers on the CPU, when `devices` has the CPU: jobs that run at once on it,
  // sharing its cores (each job's step is a little slower, none waits in the queue for another).
  int cpu_workers = 1;
  // Where served models run: "auto" = cuda:0 when there is a GPU, else the CPU.
  std::string serving_device = "auto";
  BatchingOptions batching;
  int64_t max_pending_jobs = 1000;
  size_t max_loaded_models = 32;  // resident model versions (least recently used unloaded)
  // Bytes of resident models' archives (their weights); past it the least recently used are
  // unloaded. 0: no byte bound.
  int64_t max_model_memory = int64_t{8} << 30;
  RequestLimits limits;
  int64_t export_chunk_bytes = 1 << 20;
  int64_t max_import_bytes = int64_t{256} << 20;  // RegisterModel: the largest ONNX file taken
  bool reflection = false;                        // gRPC server reflection (hands out the whole schema)
  // Transport security: PEM files. With tls_client_ca every client must present a certificate
  // signed by it (mTLS).
  std::string tls_cert, tls_key, tls_client_ca;
  // Bearer tokens (server/tokens.h); "" = <data_dir>/tokens.json. A file with tokens in it
  // turns authentication on; no file or an empty one leaves it off.
  std::string tokens_file;
  // Needed to listen on a non-loopback address with neither TLS nor tokens.
  bool insecure = false;
  // Bytes one job may hold (estimated from its spec: workers/job_memory.h); -1: half of what the
  // process may use (physical memory, cgroup, RLIMIT_AS); 0: no limit.
  int64_t max_job_memory = -1;
  // Bytes of tensors the Predicts (and ModelInfers) in flight may hold at once, all batches
  // and models together: decoded inputs, forwards, outputs (a served graph, imported or not,
  // cannot take the process's memory): -1: 4 GiB, or the job memory budget when that is
  // smaller; 0: no limit. Beyond it the requests that would pass it get RESOURCE_EXHAUSTED.
  int64_t max_predict_memory = -1;
  // A job the server died under (RUNNING at start) resumes at most this often, then FAILS:
  // a job that kills the process cannot make it die on every restart.
  int max_crash_resumes = 2;
  // Retention of finished jobs with their metric history and files (models they registered
  // stay): the newest max_finished_jobs are kept (0: all), and none finished more than
  // job_retention ago (0: no age limit).
  int64_t max_finished_jobs = 10000;
  std::chrono::milliseconds job_retention{0};
  int64_t store_max_pages = 0;  // caps the job store's size (SQLite pages); 0 = the disk's size
  // The job store: "" = the data dir's anvil.db (SQLite, the embedded default), or a
  // postgresql:// URL (server/store_postgres.h), which several anvild replicas share: each
  // claims jobs under leases (docs/replicas.md), and their data dir may be one shared folder.
  std::string store;
  // This replica's name in the store (leases, claims, the status page): letters, digits, '.',
  // '_', '-', at most 64. "": "local" with SQLite; HOSTNAME-PID with PostgreSQL (a stable name
  // lets a restarted replica resume its own jobs at once, not after their leases lapse).
  std::string instance;
  // Replicas: ranks of one data-parallel job this replica runs (0 = every rank of a job here). A
  // job of more ranks runs as nodes spread over the replicas (server/job_span.h); needs a
  // PostgreSQL store. rank_ifname: the interface the nodes' ranks reach each other on.
  int rank_slots = 0;
  std::string rank_ifname = "lo";
  // Replicas: the lease a claimed job is held under (renewed every third of it); another
  // replica requeues the job `lease` + 2 s after its holder stopped renewing.
  std::chrono::milliseconds lease{std::chrono::seconds(15)};
  // The training doctor's STALLED watchdog: a running job with no event for this long gets a
  // finding (0: off).
  std::chrono::milliseconds stalled_after{std::chrono::minutes(30)};
  // The artifact store (server/artifacts/artifact_store.h): checkpoints, model archives and
  // imported ONNX files. "" = the data dir; a folder every replica mounts; or
  // s3://BUCKET[/PREFIX] (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), whose
  // endpoint is s3_endpoint (or AWS_ENDPOINT_URL). The data dir then keeps local copies only.
  std::string artifacts;
  std::string s3_endpoint;
};

class Store;
class MetricsHub;
class ModelRegistry;
class Scheduler;
class GrpcFront;

class AnvilServer {
 public:
  explicit AnvilServer(ServerOptions options);
  ~AnvilServer();

  // Opens the store, recovers jobs, starts serving; the health status turns SERVING once
  // recovery is done. Throws on a bad data dir or an address that cannot be bound.
  void start();
  int port() const { return port_; }
  int metrics_port() const;            // 0 without a metrics address
  size_t metrics_connections() const;  // open on the metrics address now
  const ServerOptions& options() const { return options_; }

  // Graceful stop: NOT_SERVING, no new jobs, running jobs checkpointed (INTERRUPTED, resumed
  // on the next start), queued predictions and metric streams ended with UNAVAILABLE, then
  // the gRPC server stops. Idempotent.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(8));
  // What is wrong with the data dir's job store, if anything, and what an operator can do;
  // changes nothing (anvild --repair).
  static std::string repair_report(const std::string& data_dir);
  void wait();

  struct State;  // shared with the services

 private:
  ServerOptions options_;
  std::unique_ptr<State> state_;
  std::unique_ptr<GrpcFront> front_;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace anvil::server
