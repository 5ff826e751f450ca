#include "server/server.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/backend/device_info.h"
#include "core/backend/registry.h"
#include "core/data/datasets/digits.h"
#include "core/util/utf8.h"
#include "server/grpc_front.h"
#include "server/heavy_work.h"
#include "server/log.h"
#include "server/loopback.h"
#include "server/state.h"
#include "server/status.h"
#include "server/status_page.h"
#include "server/store_sqlite.h"
#include "workers/job_memory.h"
#include "workers/worker.h"

namespace anvil::server {

namespace fs = std::filesystem;

namespace {

// The worker devices for `spec` ("auto" or a comma-separated list). GPUs come first: a job
// that asks for "any" device then lands on a GPU when one is free.
std::vector<Device> WorkerDevices(const std::string& spec) {
  std::vector<Device> out;
  if (spec == "auto" || spec.empty()) {
    for (int i = 0; i < cuda_device_count(); ++i) out.push_back(CUDA(i));
    if (cuda_device_count() == 0 && cuda_is_built()) {
      log(LogLevel::kInfo, "no CUDA workers: ", cuda_unavailable_reason());
    }
    out.push_back(kCPU);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const Device d(spec.substr(start, comma - start));
    if (d.is_cuda()) backend_for(d);  // a clear error for a device this machine lacks
    ANVIL_CHECK(std::find(out.begin(), out.end(), d) == out.end(), "devices: ", d, " is listed twice");
    out.push_back(d);
    start = comma + 1;
  }
  std::stable_partition(out.begin(), out.end(), [](const Device& d) { return d.is_cuda(); });
  return out;
}

Device ServingDevice(const std::string& spec) {
  if (spec == "auto" || spec.empty()) return cuda_is_available() ? CUDA(0) : kCPU;
  const Device d(spec);
  if (d.is_cuda()) backend_for(d);
  return d;
}

std::string ReadPem(const std::string& path, const char* flag) {
  ANVIL_CHECK(!path.empty(), "anvild: ", flag, " is required with TLS (--tls-cert and --tls-key go together)");
  std::ifstream in(path);
  ANVIL_CHECK(in.good(), "anvild: ", flag, " ", path, ": cannot read it");
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ANVIL_CHECK(pem.find("-----BEGIN ") != std::string::npos, "anvild: ", flag, " ", path, ": expected a PEM file");
  return pem;
}

std::shared_ptr<grpc::ServerCredentials> TlsCredentials(const ServerOptions& o) {
  grpc::SslServerCredentialsOptions ssl(o.tls_client_ca.empty()
                                            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_key_cert_pairs.push_back({ReadPem(o.tls_key, "--tls-key"), ReadPem(o.tls_cert, "--tls-cert")});
  if (!o.tls_client_ca.empty()) ssl.pem_root_certs = ReadPem(o.tls_client_ca, "--tls-client-ca");
  return grpc::SslServerCredentials(ssl);
}

int64_t count_entries(const fs::path& dir) {
  std::error_code ec;
  int64_t n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

// The replica's name: the option when given (checked), else "local" for the embedded store and
// HOSTNAME-PID for a shared one (unique among replicas on one host).
std::string InstanceName(const std::string& given, bool replicated) {
  std::string name = given;
  if (name.empty() && !replicated) return "local";
  if (name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    name = std::string(host) + "-" + std::to_string(::getpid());
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
    }
    if (name.size() > 64) name = name.substr(name.size() - 64);
  }
  const bool valid = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  ANVIL_CHECK(valid, "--instance: expected 1 to 64 letters, digits, '.', '_' or '-', got '", echo(name), "'");
  return name;
}

}  // namespace

std::string AnvilServer::repair_report(const std::string& data_dir) {
  const fs::path root = fs::absolute(data_dir);
  const fs::path db = root / "anvil.db";
  std::string out = "anvild --repair: the job store " + db.string() + "\n";
  const int64_t folders = count_entries(root / "jobs");
  std::error_code ec;
  if (!fs::exists(db)) {
    return out + "  absent: a start creates an empty store (" + std::to_string(folders) +
           " job folder(s) under jobs/ would have no jobs)\nNothing was changed.\n";
  }
  const auto size = fs::file_size(db, ec);
  out += "  size: " + (ec ? "unreadable (" + ec.message() + ")" : std::to_string(size) + " bytes") + "\n";
  bool opens = false;
  if (!ec && size > 0) {
    try {
      SqliteStore store(db.string());
      opens = true;
      out += "  opens: schema version " + std::to_string(Store::kSchemaVersion) + ", " +
             std::to_string(store.list_jobs().size()) + " job(s), " + std::to_string(store.list_models().size()) +
             " model version(s)\n";
    } catch (const std::exception& e) {
      out += std::string("  does not open: ") + e.what() + "\n";
    }
  }
  out += "  job folders under jobs/: " + std::to_string(folders) + "\n";
  if (opens) return out + "The store is healthy: nothing to repair. Nothing was changed.\n";
  return out +
         "To start again, stop anvild and move the store aside (keep it: it may be recoverable with sqlite3's "
         ".recover):\n  mv " +
         db.string() + " " + db.string() +
         ".broken\n"
         "The next start then creates an empty store; the job folders stay on disk but no job or model refers "
         "to them (their checkpoints and model archives can be copied out). Nothing was changed.\n";
}

AnvilServer::AnvilServer(ServerOptions options) : options_(std::move(options)) {}

AnvilServer::~AnvilServer() { shutdown(std::chrono::seconds(2)); }

void AnvilServer::start() {
  auto s = std::make_unique<State>();
  s->options = options_;
  fs::create_directories(options_.data_dir);
  s->data_root = fs::canonical(options_.data_dir).string();
  const bool replicated = is_postgres_location(options_.store);
  s->instance = InstanceName(options_.instance, replicated);
  if (replicated) {
    // The folder may be shared with other replicas: lock this instance's name only, and leave
    // temporaries alone (another replica may be writing them).
    s->data_dir_lock = std::make_unique<DataDirLock>(s->data_root, "anvild-" + s->instance + ".lock");
  } else {
    s->data_dir_lock = std::make_unique<DataDirLock>(s->data_root);
    if (const int64_t removed = remove_unfinished_temporaries(s->data_root); removed > 0) {
      log(LogLevel::kInfo, "removed ", removed,
          " unfinished temporary file(s) (NAME.tmp.XXXXXX) an earlier stop left under ", s->data_root);
    }
  }
  if (s->options.datasets_dir.empty()) s->options.datasets_dir = data::default_data_dir();
  // Absolute, so messages can be scrubbed of it exactly (never of a bare word like "data").
  s->options.datasets_dir = fs::absolute(s->options.datasets_dir).lexically_normal().string();
  while (s->options.datasets_dir.size() > 1 && s->options.datasets_dir.back() == '/')
    s->options.datasets_dir.pop_back();
  if (!options_.metrics_address.empty()) {
    s->metrics = std::make_unique<metrics::ServiceMetrics>(s->metrics_registry);
    // Heavy calls whose client left (server/heavy_work.h): counted where the work stops, read
    // at each scrape.
    metrics::Family<metrics::Counter>& abandoned = s->metrics_registry.counter(
        "anvil_heavy_work_abandoned_total",
        "Heavy calls (dry runs, quantizations, ONNX exports, model uploads) given up because they were cancelled "
        "(the client left, or the server ended the call): while queued for the work pool, or between the phases "
        "of their work (since the process started).",
        {"when"});
    s->metrics_registry.add_collector([&abandoned] {
      const AbandonedHeavyWork a = abandoned_heavy_work();
      metrics::advance_to(abandoned.with({"queued"}), static_cast<double>(a.queued));
      metrics::advance_to(abandoned.with({"running"}), static_cast<double>(a.running));
    });
    std::string why_not;
    s->gpu_metrics = metrics::GpuMetrics::Open(s->metrics_registry, metrics::default_nvml_library(), &why_not);
    if (s->gpu_metrics) {
      log(LogLevel::kInfo, "GPU metrics from NVML for ", s->gpu_metrics->device_count(), " GPU(s)");
    } else {
      log(LogLevel::kInfo, "no GPU metrics: ", why_not);
    }
  }
  if (replicated) {
    // Calls over a cut network fail within a third of the lease, so the keeper learns in time.
    StoreOptions store_options;
    store_options.postgres_io_timeout_ms = static_cast<int>(std::max<int64_t>(500, options_.lease.count() / 3));
    store_options.postgres_connect_timeout_s = static_cast<int>(std::max<int64_t>(2, options_.lease.count() / 3000));
    s->store = open_store(options_.store, store_options);
    s->lease_store = open_store(options_.store, store_options);
    log(LogLevel::kInfo, "job store: PostgreSQL at ", s->store->path(), "; this replica is '", s->instance, "'");
  } else {
    const fs::path db = options_.store.empty() ? fs::path(s->data_root) / "anvil.db" : fs::path(options_.store);
    std::error_code ec;
    // SQLite takes a 0-byte file for a new, empty database: starting on one would forget every
    // job and model while their folders stay behind. Refuse; an operator decides.
    ANVIL_CHECK(!fs::exists(db) || fs::file_size(db, ec) > 0 || ec, "the job store ", db.string(),
                " is empty (0 bytes): it was truncated or never written, and starting would orphan ",
                count_entries(fs::path(s->data_root) / "jobs"),
                " job folder(s) under jobs/. Restore it from a backup, or "
                "run `anvild --repair` for the options");
    try {
      s->store = std::make_unique<SqliteStore>(db.string(), options_.store_max_pages);
    } catch (const Error& e) {
      throw Error(detail::StrCat(e.what(), "; run `anvild --repair` for the options"));
    }
  }
  if (s->options.max_job_memory < 0) {
    std::string basis;
    s->options.max_job_memory = workers::default_job_memory_budget(&basis);
    log(LogLevel::kInfo, "job memory budget ", workers::format_bytes(s->options.max_job_memory), ": ", basis,
        " (--max-job-memory)");
  }
  if (s->options.max_predict_memory < 0) {
    constexpr int64_t kDefaultPredictMemory = int64_t{4} << 30;
    const int64_t jobs = s->options.max_job_memory;
    s->options.max_predict_memory = jobs > 0 ? std::min(kDefaultPredictMemory, jobs) : kDefaultPredictMemory;
  }
  if (s->options.max_predict_memory > 0) {
    log(LogLevel::kInfo, "Predict memory bound ", workers::format_bytes(s->options.max_predict_memory),
        " of tensors across the Predicts in flight (--max-predict-memory)");
  }
  BatchingOptions batching = options_.batching;
  batching.memory_limit = s->options.max_predict_memory;
  const Device serving = ServingDevice(options_.serving_device);
  ArtifactOptions artifact_options;
  artifact_options.s3_endpoint = options_.s3_endpoint;
  s->artifacts = open_artifact_store(options_.artifacts, s->data_root, artifact_options);
  if (!options_.artifacts.empty()) log(LogLevel::kInfo, "artifacts: ", s->artifacts->describe());
  s->registry =
      std::make_unique<ModelRegistry>(*s->store, s->data_root, batching, s->metrics.get(), options_.max_loaded_models,
                                      serving, s->artifacts.get(), options_.max_model_memory);
  SchedulerOptions so{s->data_root,
                      s->options.datasets_dir,
                      options_.max_pending_jobs,
                      s->options.max_job_memory,
                      options_.max_crash_resumes,
                      options_.max_finished_jobs,
                      options_.job_retention};
  so.instance = s->instance;
  so.lease = options_.lease;
  so.stalled_after = options_.stalled_after;
  if (options_.rank_slots > 0) {
    ANVIL_CHECK(replicated,
                "--rank-slots spreads data-parallel jobs over replicas that share a PostgreSQL store "
                "(--store postgresql://...); with the embedded store every rank of a job runs here");
    ANVIL_CHECK(options_.rank_slots <= 64, "--rank-slots: expected 0 to 64, got ", options_.rank_slots);
    so.span.rank_slots = options_.rank_slots;
    so.span.rendezvous_url = options_.store;
    so.span.ifname = options_.rank_ifname;
    so.span.lease_grace = so.lease_grace;
    so.span.outage_wait = so.store_outage_wait;
  }
  // A version registered on another replica is loaded here before its first Predict.
  so.on_notice = [registry = s->registry.get()](std::string_view what) {
    // "model VERSION NAME"
    const size_t space = what.find(' ', 6);
    if (space == std::string_view::npos) return;
    int64_t version = 0;
    for (char c : what.substr(6, space - 6)) {
      if (c < '0' || c > '9' || version > (int64_t{1} << 40)) return;
      version = version * 10 + (c - '0');
    }
    if (version > 0) registry->prefetch(std::string(what.substr(space + 1)), version);
  };
  std::vector<WorkerFactory> factories;
  ANVIL_CHECK(options_.cpu_workers >= 1 && options_.cpu_workers <= 64, "--cpu-workers: expected 1 to 64, got ",
              options_.cpu_workers);
  for (const Device d : WorkerDevices(options_.devices)) {
    for (int i = 0; i < (d.is_cuda() ? 1 : options_.cpu_workers); ++i) {
      // A GPU's utilisation from NVML for the doctor's per-job LOW_DEVICE_UTILISATION (none
      // without a metrics address, where NVML is not opened).
      workers::UtilisationSource utilisation;
      if (d.is_cuda() && s->gpu_metrics) {
        // The bus id is read once, here; the reader looks the GPU up by it at each interval.
        utilisation = [read = s->gpu_metrics->utilisation_reader(), bus_id = cuda_pci_bus_id(d.index)] {
          return read(bus_id);
        };
      }
      factories.push_back([d, utilisation](workers::EventSink sink) {
        return workers::make_device_worker(d, std::move(sink), utilisation);
      });
    }
  }
  // Streams of jobs that run on another replica learn of new events through the store.
  if (s->metrics) s->metrics->set_replica(s->instance, std::string(s->store->engine()));
  s->hub.start_ticker(std::chrono::milliseconds(200));
  s->scheduler = std::make_unique<Scheduler>(*s->store, s->hub, *s->registry, so, std::move(factories),
                                             s->metrics.get(), s->lease_store.get());
  // Recovery before the port opens: no request can race the requeueing of earlier jobs.
  s->scheduler->recover();
  s->scheduler->expire_finished_jobs();
  if (s->metrics) {
    s->http = std::make_unique<metrics::HttpEndpoint>(s->metrics_registry, options_.metrics_address);
    Store* store = s->store.get();
    s->http->add_page("/", [] { return std::make_pair(std::string("text/html; charset=utf-8"), status_html()); });
    s->http->add_page("/status.json", [page = std::make_shared<StatusPage>(*store, 20, 250, &s->metrics->serving)] {
      return std::make_pair(std::string("application/json"), page->json());
    });
  }
  state_ = std::move(s);
  state_->tokens = std::make_unique<TokenSet>(
      options_.tokens_file.empty() ? (fs::path(state_->data_root) / "tokens.json").string() : options_.tokens_file);
  const bool tls = !options_.tls_cert.empty() || !options_.tls_key.empty();
  const bool tokens = state_->tokens->enabled();
  if (!state_->tokens->error().empty())
    log(LogLevel::kError, "token file: ", state_->tokens->error(), " (no token is accepted)");
  if (!is_loopback_address(options_.address)) {
    ANVIL_CHECK(tls || tokens || options_.insecure, "anvild: listening on ", options_.address,
                " (not loopback) with neither TLS (--tls-cert/--tls-key) nor tokens (anvil token create) would let "
                "anyone who reaches the port train, predict and export; add one, or pass --insecure");
    if (!tls && !tokens)
      log(LogLevel::kWarning, "listening on ", options_.address, " with no TLS and no tokens (--insecure)");
    else if (!tls)
      log(LogLevel::kWarning, "tokens on ", options_.address, " travel unencrypted without TLS");
  }
  log(LogLevel::kInfo, "transport ", tls ? (options_.tls_client_ca.empty() ? "TLS" : "mutual TLS") : "plaintext",
      ", tokens ", tokens ? "required (" + state_->tokens->path() + ")" : std::string("off"), ", reflection ",
      options_.reflection ? "on" : "off");
  state_->predict_pool =
      std::make_unique<BoundedExecutor>(options_.limits.max_concurrent_predicts, options_.limits.max_predict_queue);
  state_->call_pool =
      std::make_unique<BoundedExecutor>(options_.limits.max_concurrent_calls, options_.limits.max_call_queue);
  state_->stream_pool = std::make_unique<BoundedExecutor>(options_.limits.max_streams, 0);
  state_->replay_pool = std::make_unique<BoundedExecutor>(4, options_.limits.max_streams);
  state_->work_pool = std::make_unique<BoundedExecutor>(options_.limits.max_concurrent_heavy_work,
                                                        options_.limits.max_heavy_work_queue);
  GrpcFrontOptions fo;
  fo.quiesce = [state = state_.get()] {
    for (BoundedExecutor* pool : {state->predict_pool.get(), state->call_pool.get(), state->stream_pool.get(),
                                  state->replay_pool.get(), state->work_pool.get()}) {
      pool->wait_idle();
    }
  };
  fo.address = options_.address;
  if (tls) fo.credentials = TlsCredentials(options_);
  fo.limits = options_.limits;
  fo.reflection = options_.reflection;
  State* state = state_.get();
  front_ = std::make_unique<GrpcFront>(fo, [state] {
    std::vector<std::unique_ptr<grpc::Service>> services;
    services.push_back(make_training_service(*state));
    services.push_back(make_serving_service(*state));
    services.push_back(make_kserve_service(*state));
    return services;
  });
  front_->start();
  port_ = front_->port();
  front_->set_health(true);
}

void AnvilServer::shutdown(std::chrono::milliseconds grace) {
  if (!front_ || stopped_.exchange(true)) return;
  front_->set_health(false);
  const auto until = std::chrono::steady_clock::now() + grace;
  state_->draining = true;  // new Predicts and submits get UNAVAILABLE from here on
  state_->scheduler->drain(grace);
  // Predicts already admitted finish (their batches still run): only new ones are refused.
  while (state_->predicts_in_flight.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  state_->hub.close_all();
  front_->shutdown(std::chrono::seconds(1));
  // Workers joined before the registry closes: a job that still ends now registers its model.
  state_->scheduler.reset();
  state_->registry->close();
  state_->http.reset();
  state_->data_dir_lock.reset();  // another server may take the folder from here on
}

int AnvilServer::metrics_port() const { return state_ && state_->http ? state_->http->port() : 0; }
size_t AnvilServer::metrics_connections() const { return state_ && state_->http ? state_->http->connections() : 0; }

void AnvilServer::wait() {
  if (front_) front_->wait();
}

}  // namespace anvil::server
