// anvil: the command-line client of anvild.
//
//   anvil [--server HOST:PORT] [--json] COMMAND ...
//     submit SPEC.json [--watch] [--dry-run]   jobs [--state S]   job ID   watch ID [--from-step N]
//     cancel ID   models   models add NAME FILE.onnx [--label L]...   model NAME[:VERSION]
//     predict NAME[:VERSION] --input FILE [--top-k K] [--label-column COLUMN]
//     export NAME[:VERSION] --format native|safetensors|onnx [--opset N] [--dynamic-axis input:1=seq] [--verify] -o
//     FILE   health
//
// Exit codes: one table, client/exit_codes.h (also in `anvil --help`).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "client/exit_codes.h"
#include "client/input_file.h"
#include "client/progress.h"
#include "client/target.h"
#include "core/util/sha256.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/tokens.h"

namespace {

using namespace anvil;

// The bearer token every call carries ("" = none): --token or $ANVIL_TOKEN.
std::string g_token;

class Failure : public std::runtime_error {
 public:
  Failure(int code, const std::string& m) : std::runtime_error(m), code(code) {}
  int code;
};

std::string ReadFileOrFail(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) {
    throw Failure(client::kExitBadInput, std::string(flag) + ": cannot read \"" + path + "\": " + std::strerror(errno));
  }
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Cli {
  std::string server = "127.0.0.1:50051";
  bool json = false;
  // TLS: the CA that signed the server's certificate; a client certificate for mutual TLS;
  // the name the server's certificate is for, when it differs from the address's host.
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Training::Stub> training;
  std::unique_ptr<v1::Serving::Stub> serving;

  void Connect() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
    if (!tls_ca.empty() || !tls_cert.empty()) {
      grpc::SslCredentialsOptions ssl;
      if (!tls_ca.empty()) ssl.pem_root_certs = ReadFileOrFail(tls_ca, "--tls-ca");
      if (!tls_cert.empty()) {
        ssl.pem_cert_chain = ReadFileOrFail(tls_cert, "--tls-cert");
        ssl.pem_private_key = ReadFileOrFail(tls_key, "--tls-key");
      }
      creds = grpc::SslCredentials(ssl);
    }
    const client::Target target = client::grpc_target(server);
    if (!tls_server_name.empty()) {
      args.SetSslTargetNameOverride(tls_server_name);
    } else if ((!tls_ca.empty() || !tls_cert.empty()) && target.uri.rfind("ipv", 0) == 0) {
      args.SetSslTargetNameOverride(target.first_host);  // a resolved list: the certificate names the host
    }
    args.SetServiceConfigJSON(client::client_service_config());
    channel = grpc::CreateCustomChannel(target.uri, creds, args);
    training = v1::Training::NewStub(channel);
    serving = v1::Serving::NewStub(channel);
  }
};

// A failed call as one line: what was asked, the server's message and the code's name.
void Check(const grpc::Status& s, const std::string& what) {
  if (!s.ok()) {
    throw Failure(client::exit_code_for(s.error_code()),
                  what + ": " + s.error_message() + " (" + client::status_code_name(s.error_code()) + ")");
  }
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::unique_ptr<grpc::ClientContext> Ctx(double seconds = 30) {
  auto c = std::make_unique<grpc::ClientContext>();
  if (!g_token.empty()) c->AddMetadata("authorization", "Bearer " + g_token);
  if (seconds > 0)
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000)));
  return c;
}

void SplitModel(const std::string& ref, std::string& name, std::string& version) {
  const size_t colon = ref.rfind(':');
  name = colon == std::string::npos ? ref : ref.substr(0, colon);
  version = colon == std::string::npos ? "latest" : ref.substr(colon + 1);
}

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string FormatShape(const google::protobuf::RepeatedField<int64_t>& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + (shape[i] < 0 ? "N" : std::to_string(shape[i]));
  return out + "]";
}

// `anvil job ID` without --json: the facts a person looks for, one per line.
void PrintJobSummary(const v1::Job& j) {
  std::printf("%s  %s\n", j.id().c_str(), j.name().c_str());
  std::printf("  state:     %s%s\n", StateName(j.state()).c_str(),
              j.reason().empty() ? "" : ("  (" + j.reason() + ")").c_str());
  std::printf("  device:    %s\n", j.device().empty() ? "-" : j.device().c_str());
  if (j.spec().has_quantize()) {
    const v1::QuantizeSpec& q = j.spec().quantize();
    std::printf(
        "  quantize: %s%s, at most %.2f points below float32\n", q.mode().c_str(),
        q.mode() == "static"
            ? (" (" + q.observer() + ", " + std::to_string(q.calibration_batches()) + " calibration batches)").c_str()
            : "",
        q.max_accuracy_drop());
  }
  if (!j.spec().precision().empty() && j.spec().precision() != "fp32") {
    std::printf("  precision: %s (serving %s)\n", j.spec().precision().c_str(),
                j.spec().serving_precision().empty() ? "fp32" : j.spec().serving_precision().c_str());
  }
  std::printf("  progress:  step %lld, epoch %lld of %lld\n", static_cast<long long>(j.step()),
              static_cast<long long>(j.epoch()), static_cast<long long>(j.spec().epochs()));
  std::printf("  created:   %s\n  started:   %s\n  finished:  %s\n", FormatTime(j.created_unix_ms()).c_str(),
              FormatTime(j.started_unix_ms()).c_str(), FormatTime(j.finished_unix_ms()).c_str());
  if (!j.model_name().empty()) {
    std::printf("  model:     %s:%lld\n", j.model_name().c_str(), static_cast<long long>(j.model_version()));
  }
}

// `anvil model NAME` without --json.
void PrintModelSummary(const v1::Model& m) {
  // A model registered from an ONNX file has no job.
  const std::string origin = m.job_id().empty() ? "imported" : "from job " + m.job_id();
  std::printf("%s:%lld  %s, %lld parameters, on %s\n", m.name().c_str(), static_cast<long long>(m.version()),
              origin.c_str(), static_cast<long long>(m.parameters()), m.device().empty() ? "-" : m.device().c_str());
  for (const v1::TensorSignature& t : m.inputs()) {
    std::printf("  input   %-10s %s %s\n", t.name().c_str(), v1::DType_Name(t.dtype()).c_str(),
                FormatShape(t.shape()).c_str());
  }
  for (const v1::TensorSignature& t : m.outputs()) {
    std::printf("  output  %-10s %s %s\n", t.name().c_str(), v1::DType_Name(t.dtype()).c_str(),
                FormatShape(t.shape()).c_str());
  }
  if (m.labels_size() > 0) {
    std::string labels;
    for (int i = 0; i < m.labels_size() && i < 20; ++i) labels += (i ? ", " : "") + m.labels(i);
    if (m.labels_size() > 20) labels += ", ... (" + std::to_string(m.labels_size()) + ")";
    std::printf("  classes: %s\n", labels.c_str());
  }
  if (!m.precision().empty() && (m.precision() != "fp32" || !m.accuracy().empty())) {
    // Mixed precision: the serving dtype and what each precision scored at registration.
    std::string accuracy;
    for (const char* p : {"fp32", "bf16", "fp16", "int8"}) {
      const auto it = m.accuracy().find(p);
      if (it == m.accuracy().end()) continue;
      char cell[64];
      std::snprintf(cell, sizeof(cell), "%s%s %.2f %%", accuracy.empty() ? "" : ", ", p, 100.0 * it->second);
      accuracy += cell;
    }
    std::printf("  serves in: %s%s\n", m.precision().c_str(),
                accuracy.empty() ? "" : ("  (validation accuracy: " + accuracy + ")").c_str());
  }
  if (!m.quantization().empty()) std::printf("  quantization: %s\n", m.quantization().c_str());
  if (m.size_bytes() > 0) {
    std::printf("  size: %.1f KiB\n", static_cast<double>(m.size_bytes()) / 1024.0);
  }
  std::printf("  created: %s\n", FormatTime(m.created_unix_ms()).c_str());
}

// Whether a label cell names the predicted class: its index, or its name.
bool LabelMatches(const std::string& cell, int64_t cls, const std::string& name) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (end != cell.c_str() && *end == '\0') return v == static_cast<double>(cls);
  return cell == name;
}

void PrintJob(const v1::Job& j) {
  std::printf(
      "%-18s %-12s %-11s step %-6lld epoch %-4lld %s%s\n", j.id().c_str(), j.name().c_str(),
      StateName(j.state()).c_str(), static_cast<long long>(j.step()), static_cast<long long>(j.epoch()),
      j.model_name().empty() ? "" : ("model " + j.model_name() + ":" + std::to_string(j.model_version())).c_str(),
      j.reason().empty() ? "" : ("  (" + j.reason() + ")").c_str());
}

// Follows a job's metrics to its end, reconnecting (from the next step) when the stream
// breaks. Returns the final state.
v1::JobState Watch(Cli& cli, const std::string& id, int64_t from_step) {
  anvil::client::Progress progress(isatty(STDOUT_FILENO) && !cli.json);
  int64_t next_step = from_step, last_seq = 0;
  int retries = 0;
  while (true) {
    auto ctx = Ctx(0);
    v1::StreamMetricsRequest req;
    req.set_job_id(id);
    req.set_from_step(next_step);
    auto reader = cli.training->StreamMetrics(ctx.get(), req);
    v1::MetricEvent e;
    v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&e)) {
      retries = 0;
      if (e.seq() <= last_seq) continue;  // a reconnect replays the job's state events
      last_seq = e.seq();
      if (cli.json) {
        std::string line;
        google::protobuf::util::JsonPrintOptions o;
        o.preserve_proto_field_names = true;
        (void)google::protobuf::util::MessageToJsonString(e, &line, o);
        std::printf("%s\n", line.c_str());
      } else {
        std::fputs(progress.update(e).c_str(), stdout);
      }
      std::fflush(stdout);
      if (e.has_step_metrics() || e.has_epoch_metrics()) next_step = std::max(next_step, e.step() + 1);
      if (e.event_case() == v1::MetricEvent::kState) last_state = e.state();
    }
    const grpc::Status st = reader->Finish();
    if (st.ok() && (last_state == v1::SUCCEEDED || last_state == v1::FAILED || last_state == v1::CANCELLED)) {
      std::fputs(progress.finish().c_str(), stdout);
      return last_state;
    }
    if (!st.ok() && st.error_code() != grpc::StatusCode::UNAVAILABLE) Check(st, "watch " + id);
    if (++retries > 60) {
      throw Failure(client::kExitUnavailable, "watch " + id + ": gave up reconnecting (" +
                                                  (st.ok() ? "the stream ended early" : st.error_message()) + ")");
    }
    std::fputs(progress.finish().c_str(), stdout);
    std::fprintf(stderr, "stream interrupted (%s); reconnecting from step %lld...\n", st.error_message().c_str(),
                 static_cast<long long>(next_step));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int Run(int argc, char** argv) {
  Cli cli;
  CLI::App app{"anvil: submit training jobs to anvild, watch them, and use the models they produce"};
  app.require_subcommand(1);
  app.footer(client::exit_code_table());
  app.add_option("--server", cli.server,
                 "anvild address (default 127.0.0.1:50051, or $ANVIL_SERVER); replicas: HOST:PORT,HOST:PORT,... or "
                 "dns:///NAME:PORT (calls spread round-robin over the healthy ones, safe ones retried)")
      ->envname("ANVIL_SERVER");
  app.add_flag("--json", cli.json, "machine-readable output");
  app.add_option("--token", g_token, "bearer token for a server that requires one (or $ANVIL_TOKEN)")
      ->envname("ANVIL_TOKEN");
  app.add_option("--tls-ca", cli.tls_ca, "connect over TLS, trusting this CA (PEM) for the server's certificate")
      ->envname("ANVIL_TLS_CA");
  app.add_option("--tls-cert", cli.tls_cert, "mutual TLS: this client's certificate (PEM)")->envname("ANVIL_TLS_CERT");
  app.add_option("--tls-key", cli.tls_key, "mutual TLS: this client's private key (PEM)")->envname("ANVIL_TLS_KEY");
  app.add_option("--tls-server-name", cli.tls_server_name, "the name on the server's certificate, if not the host");

  std::string spec_path, job_id, model_ref, input_path, out_path, format = "native", state_filter, label_column;
  bool watch = false, dry_run = false;
  int64_t from_step = 0, top_k = 3;
  auto* submit = app.add_subcommand("submit", "submit a training job from a JSON spec file");
  submit->add_option("spec", spec_path, "JobSpec as JSON (protobuf JSON mapping)")->required();
  submit->add_flag("--watch", watch, "follow the job until it ends");
  submit->add_flag("--dry-run", dry_run, "validate only");
  auto* jobs = app.add_subcommand("jobs", "list jobs, newest first");
  jobs->add_option("--state", state_filter, "QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or INTERRUPTED (any case)");
  int64_t jobs_limit = 0;
  jobs->add_option("--limit", jobs_limit, "at most this many, newest first (default: all, read a page at a time)");
  auto* delete_cmd = app.add_subcommand("delete", "delete a finished job with its metrics and files (not its model)");
  delete_cmd->add_option("id", job_id)->required();
  auto* job = app.add_subcommand("job", "show one job");
  job->add_option("id", job_id)->required();
  auto* watch_cmd = app.add_subcommand("watch", "follow a job's progress until it ends");
  watch_cmd->add_option("id", job_id)->required();
  watch_cmd->add_option("--from-step", from_step, "replay from this step");
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("id", job_id)->required();
  auto* doctor_cmd =
      app.add_subcommand("doctor", "the training doctor's findings on a job: evidence and advice, most severe first");
  doctor_cmd->add_option("id", job_id)->required();
  auto* models_cmd = app.add_subcommand("models", "list served models (models add: register an ONNX file)");
  auto* models_add =
      models_cmd->add_subcommand("add", "register an ONNX file trained elsewhere as the model's next version");
  std::string add_name, add_file;
  std::vector<std::string> add_labels;
  models_add->add_option("name", add_name, "the model's name")->required();
  models_add->add_option("file", add_file, "the .onnx file")->required();
  models_add->add_option("--label", add_labels, "class names in class order (repeatable); default: the file's own");
  auto* model = app.add_subcommand("model", "show a model's signature");
  model->add_option("model", model_ref, "NAME[:VERSION]")->required();
  auto* quantize_cmd = app.add_subcommand(
      "quantize", "quantize a model to int8; the new version is registered if it passes the accuracy gate");
  quantize_cmd->add_option("model", model_ref, "NAME[:VERSION]")->required();
  std::string quantize_mode = "static", quantize_observer = "histogram";
  int64_t calibration_batches = 16;
  double max_drop = 1.0;
  quantize_cmd->add_option("--mode", quantize_mode, "static (calibrated; default) or dynamic")
      ->check(CLI::IsMember({"static", "dynamic"}));
  quantize_cmd
      ->add_option("--observer", quantize_observer, "static: histogram (default), minmax, moving_average_minmax")
      ->check(CLI::IsMember({"histogram", "minmax", "moving_average_minmax"}));
  quantize_cmd->add_option("--calibration-batches", calibration_batches, "static: training batches observed (16)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  quantize_cmd->add_option("--max-accuracy-drop", max_drop, "points of validation accuracy int8 may lose (1)")
      ->check(CLI::Range(0.0, 100.0));
  std::string quantize_dataset, quantize_label_column;
  uint64_t quantize_seed = 0;
  quantize_cmd->add_option("--dataset", quantize_dataset,
                           "calibrate and evaluate on this dataset: a built-in (digits, blobs, spirals) or a path in "
                           "the server's data root (default: the training job's; needed for an imported ONNX model)");
  quantize_cmd->add_option("--label-column", quantize_label_column, "with --dataset, a CSV's label column");
  quantize_cmd->add_option("--seed", quantize_seed, "with --dataset, the seed of generated data and the split (0)");
  auto* predict = app.add_subcommand("predict", "run a model on inputs from a file");
  predict->add_option("model", model_ref, "NAME[:VERSION]")->required();
  predict->add_option("--input", input_path, "CSV (one sample per row), JSON (array of samples) or an image")
      ->required();
  predict->add_option("--top-k", top_k, "classes to show per sample (default 3)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  predict->add_option("--label-column", label_column,
                      "CSV: the column holding each sample's true class (index from 0, -1 for the last, or the "
                      "header's name); it is left out of the input and the accuracy is reported");
  auto* exp = app.add_subcommand("export", "download a model file");
  exp->add_option("model", model_ref, "NAME[:VERSION]")->required();
  exp->add_option("--format", format, "native, safetensors or onnx")
      ->check(CLI::IsMember({"native", "safetensors", "onnx"}));
  exp->add_option("-o,--output", out_path, "file to write")->required();
  int opset = 0;
  std::vector<std::string> dynamic_axes;
  exp->add_option("--opset", opset, "ONNX: the opset (13 to 17; default 17)")->check(CLI::Range(13, 17));
  exp->add_option("--dynamic-axis", dynamic_axes,
                  "ONNX: a symbolic axis beyond the batch, INPUT:DIM=NAME (e.g. input:1=seq); repeatable");
  bool fold_batch_norm = false;
  exp->add_flag("--fold-batch-norm", fold_batch_norm,
                "ONNX: fold each batch norm into the convolution or linear layer before it");
  bool verify = false;
  exp->add_flag("--verify", verify,
                "ONNX: the server runs the file in a second runtime (OpenCV DNN) before sending it and refuses "
                "one that disagrees with the model");
  bool verbose = false;
  auto* health_cmd = app.add_subcommand("health", "check that the server is serving");
  health_cmd->add_flag("-v,--verbose", verbose,
                       "also print the server's version, CPU, ISA level, GEMM kernel and devices");

  // Tokens are managed on the server's machine, in its token file (no server call).
  std::string token_name, token_scopes = "train,serve", token_file, data_dir = "anvil-data";
  auto* token_cmd = app.add_subcommand("token", "create, list or revoke bearer tokens in anvild's token file");
  token_cmd->require_subcommand(1);
  token_cmd->add_option("--data-dir", data_dir, "anvild's data dir (the file is <data-dir>/tokens.json)");
  token_cmd->add_option("--tokens", token_file, "the token file itself (anvild --tokens)");
  auto* token_create = token_cmd->add_subcommand("create", "add a token and print it (shown only this once)");
  token_create->add_option("--name", token_name, "a name for the token (to list or revoke it)")->required();
  token_create->add_option("--scope", token_scopes, "comma-separated: train, serve, admin (default train,serve)");
  auto* token_list = token_cmd->add_subcommand("list", "list the tokens' names and scopes");
  auto* token_revoke = token_cmd->add_subcommand("revoke", "remove a token");
  token_revoke->add_option("name", token_name)->required();
  for (CLI::App* sub : {token_create, token_list, token_revoke}) sub->fallthrough();  // --data-dir after the verb

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? client::kExitOk : client::kExitBadInput;
  }
  if (app.got_subcommand("token")) {
    const std::string file = token_file.empty() ? data_dir + "/tokens.json" : token_file;
    if (token_cmd->got_subcommand("create")) {
      std::vector<server::Scope> scopes;
      std::stringstream list(token_scopes);
      for (std::string s; std::getline(list, s, ',');) scopes.push_back(server::parse_scope(s));
      std::printf("%s\n", server::create_token(file, token_name, scopes).c_str());
      std::fprintf(stderr,
                   "token \"%s\" (%s) added to %s; anvild takes it up within a second. It is shown only "
                   "now: pass it with --token or $ANVIL_TOKEN.\n",
                   token_name.c_str(), token_scopes.c_str(), file.c_str());
    } else if (token_cmd->got_subcommand("list")) {
      for (const server::TokenEntry& e : server::read_token_file(file)) {
        std::string scopes;
        for (server::Scope s : e.scopes) scopes += (scopes.empty() ? "" : ",") + server::scope_name(s);
        std::printf("%-24s %s\n", e.name.c_str(), scopes.c_str());
      }
    } else if (!server::revoke_token(file, token_name)) {
      throw Failure(client::kExitNotFound, "token \"" + token_name + "\" is not in " + file);
    }
    return 0;
  }
  cli.Connect();

  if (app.got_subcommand("submit")) {
    std::ifstream in(spec_path);
    if (!in) throw Failure(client::kExitBadInput, "cannot read \"" + spec_path + "\": " + std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    v1::SubmitJobRequest req;
    const auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), req.mutable_spec());
    if (!parsed.ok())
      throw Failure(client::kExitBadInput, spec_path + ": not a valid JobSpec: " + std::string(parsed.message()));
    req.set_dry_run(dry_run);
    v1::SubmitJobResponse resp;
    Check(cli.training->SubmitJob(Ctx().get(), req, &resp), "submit");
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else if (dry_run) {
      std::printf("spec is valid:\n%s\n", ToJson(resp.job().spec()).c_str());
    } else {
      std::printf("%s job %s (%s)\n", resp.created() ? "submitted" : "already submitted:", resp.job().id().c_str(),
                  resp.job().name().c_str());
    }
    if (watch && !dry_run) {
      const v1::JobState end = Watch(cli, resp.job().id(), 0);
      v1::GetJobRequest g;
      g.set_job_id(resp.job().id());
      v1::Job final_job;
      Check(cli.training->GetJob(Ctx().get(), g, &final_job), "job");
      if (!cli.json) PrintJob(final_job);
      return end == v1::SUCCEEDED ? client::kExitOk : client::kExitJobDidNotSucceed;
    }
    return 0;
  }
  if (app.got_subcommand("jobs")) {
    v1::ListJobsRequest req;
    if (!state_filter.empty()) {
      std::string upper = state_filter;
      std::transform(upper.begin(), upper.end(), upper.begin(),
                     [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
      v1::JobState s;
      if (!v1::JobState_Parse(upper, &s) || s == v1::JOB_STATE_UNSPECIFIED) {
        throw Failure(client::kExitBadInput,
                      "--state: expected QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or "
                      "INTERRUPTED, got \"" +
                          state_filter + "\"");
      }
      req.add_states(s);
    }
    // Every page (or up to --limit jobs), joined into one reply for --json.
    v1::ListJobsResponse resp;
    while (jobs_limit <= 0 || resp.jobs_size() < jobs_limit) {
      req.set_page_size(
          static_cast<int32_t>(jobs_limit > 0 ? std::min<int64_t>(1000, jobs_limit - resp.jobs_size()) : 1000));
      v1::ListJobsResponse page;
      Check(cli.training->ListJobs(Ctx().get(), req, &page), "jobs");
      for (v1::Job& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
      if (page.next_page_token().empty()) break;
      req.set_page_token(page.next_page_token());
    }
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      for (const v1::Job& j : resp.jobs()) PrintJob(j);
      if (resp.jobs_size() == 0) std::printf(state_filter.empty() ? "no jobs\n" : "no %s jobs\n", state_filter.c_str());
    }
    return 0;
  }
  if (app.got_subcommand("job")) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::Job resp;
    Check(cli.training->GetJob(Ctx().get(), req, &resp), "job " + job_id);
    if (cli.json)
      std::printf("%s\n", ToJson(resp).c_str());
    else
      PrintJobSummary(resp);
    return 0;
  }
  if (app.got_subcommand("watch")) {
    return Watch(cli, job_id, from_step) == v1::SUCCEEDED ? client::kExitOk : client::kExitJobDidNotSucceed;
  }
  if (app.got_subcommand("delete")) {
    v1::DeleteJobRequest req;
    req.set_job_id(job_id);
    v1::DeleteJobResponse resp;
    Check(cli.training->DeleteJob(Ctx().get(), req, &resp), "delete " + job_id);
    if (!cli.json)
      std::printf("deleted %s\n", job_id.c_str());
    else
      std::printf("{}\n");
    return 0;
  }
  if (app.got_subcommand("doctor")) {
    v1::GetFindingsRequest req;
    req.set_job_id(job_id);
    v1::GetFindingsResponse resp;
    Check(cli.training->GetFindings(Ctx().get(), req, &resp), "doctor " + job_id);
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
      return 0;
    }
    if (resp.findings().empty()) std::printf("%s: no findings\n", job_id.c_str());
    for (const v1::Finding& f : resp.findings()) {
      std::printf("%-8s %s  (steps %lld-%lld)\n", f.severity().c_str(), f.code().c_str(),
                  static_cast<long long>(f.first_step()), static_cast<long long>(f.last_step()));
      std::string evidence;
      for (const v1::FindingEvidence& e : f.evidence()) {
        char cell[96];
        std::snprintf(cell, sizeof(cell), "%s%s %.4g", evidence.empty() ? "" : ", ", e.name().c_str(), e.value());
        evidence += cell;
      }
      std::printf("  evidence: %s\n  advice:   %s\n", evidence.c_str(), f.advice().c_str());
    }
    std::string healthy;
    for (const std::string& h : resp.healthy()) healthy += (healthy.empty() ? "" : ", ") + h;
    std::printf("checked and healthy: %s\n", healthy.empty() ? "(none)" : healthy.c_str());
    return 0;
  }
  if (app.got_subcommand("cancel")) {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    v1::Job resp;
    Check(cli.training->CancelJob(Ctx().get(), req, &resp), "cancel " + job_id);
    if (cli.json)
      std::printf("%s\n", ToJson(resp).c_str());
    else
      std::printf("cancelling %s\n", job_id.c_str());
    return 0;
  }
  if (models_cmd->got_subcommand(models_add)) {
    std::ifstream in(add_file, std::ios::binary);
    if (!in) throw Failure(client::kExitBadInput, "cannot read \"" + add_file + "\": " + std::strerror(errno));
    auto ctx = Ctx(600);
    v1::Model model;
    auto writer = cli.serving->RegisterModel(ctx.get(), &model);
    v1::RegisterModelChunk c;
    c.set_name(add_name);
    for (const std::string& l : add_labels) c.add_labels(l);
    std::string buffer(1 << 20, '\0');
    anvil::Sha256 hash;
    bool sent = true;
    while (sent && in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = static_cast<size_t>(in.gcount());
      hash.update(buffer.data(), n);
      c.set_data(buffer.data(), n);
      if (!in) c.set_sha256(hash.hex_digest());  // the last piece carries the whole file's hash
      sent = writer->Write(c);
      c.Clear();
    }
    writer->WritesDone();
    Check(writer->Finish(), "models add " + add_name);
    if (cli.json) {
      std::printf("%s\n", ToJson(model).c_str());
    } else {
      PrintModelSummary(model);
    }
    return 0;
  }
  if (app.got_subcommand("models")) {
    v1::ListModelsResponse resp;
    v1::ListModelsRequest req;
    req.set_page_size(1000);
    while (true) {
      v1::ListModelsResponse page;
      Check(cli.serving->ListModels(Ctx().get(), req, &page), "models");
      for (v1::Model& m : *page.mutable_models()) *resp.add_models() = std::move(m);
      if (page.next_page_token().empty()) break;
      req.set_page_token(page.next_page_token());
    }
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      for (const v1::Model& m : resp.models()) {
        std::printf("%s:%lld  job %s  %lld parameters\n", m.name().c_str(), static_cast<long long>(m.version()),
                    m.job_id().c_str(), static_cast<long long>(m.parameters()));
      }
      if (resp.models_size() == 0) std::printf("no models\n");
    }
    return 0;
  }
  std::string name, version;
  SplitModel(model_ref, name, version);
  if (app.got_subcommand("model")) {
    v1::GetModelRequest req;
    req.set_name(name);
    req.set_version(version);
    v1::Model resp;
    Check(cli.serving->GetModel(Ctx().get(), req, &resp), "model " + model_ref);
    if (cli.json)
      std::printf("%s\n", ToJson(resp).c_str());
    else
      PrintModelSummary(resp);
    return 0;
  }
  if (app.got_subcommand("quantize")) {
    v1::QuantizeRequest req;
    req.set_model(name);
    req.set_version(version);
    req.mutable_spec()->set_mode(quantize_mode);
    req.mutable_spec()->set_observer(quantize_observer);
    req.mutable_spec()->set_calibration_batches(calibration_batches);
    req.mutable_spec()->set_max_accuracy_drop(max_drop);
    if (!quantize_dataset.empty()) {
      const bool builtin = quantize_dataset == "digits" || quantize_dataset == "blobs" || quantize_dataset == "spirals";
      if (builtin) {
        req.mutable_dataset()->set_name(quantize_dataset);
      } else {
        req.mutable_dataset()->set_path(quantize_dataset);
      }
      req.mutable_dataset()->set_label_column(quantize_label_column);
      req.set_seed(quantize_seed);
    }
    v1::QuantizeResponse resp;
    Check(cli.serving->Quantize(Ctx(600).get(), req, &resp), "quantize " + model_ref);
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      std::printf("%s\n", resp.message().c_str());
      for (int i = 0; i < resp.layers_size() && i < 5; ++i)
        std::printf("  layer %-8s %-22s SQNR %6.1f dB\n", resp.layers(i).layer().c_str(), resp.layers(i).type().c_str(),
                    resp.layers(i).sqnr_db());
      if (resp.registered()) PrintModelSummary(resp.model());
    }
    return resp.registered() ? 0 : 1;
  }
  if (app.got_subcommand("predict")) {
    v1::GetModelRequest g;
    g.set_name(name);
    g.set_version(version);
    v1::Model m;
    Check(cli.serving->GetModel(Ctx().get(), g, &m), "model " + model_ref);
    std::vector<int64_t> shape(m.inputs(0).shape().begin() + 1, m.inputs(0).shape().end());
    v1::PredictRequest req;
    req.set_model(name);
    req.set_version(version);
    req.set_top_k(top_k);
    client::InputFile input;
    try {
      input = client::read_input_file(input_path, shape, label_column);
    } catch (const std::runtime_error& e) {
      throw Failure(client::kExitBadInput, e.what());
    }
    *req.add_inputs() = std::move(input.tensor);
    v1::PredictResponse resp;
    Check(cli.serving->Predict(Ctx().get(), req, &resp), "predict " + model_ref);
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
      return 0;
    }
    int64_t correct = 0;
    for (int r = 0; r < resp.top_k_size(); ++r) {
      const v1::TopK& t = resp.top_k(r);
      std::printf("sample %d:", r);
      for (int j = 0; j < t.classes_size(); ++j)
        std::printf("  %s (%.1f%%)", t.labels(j).c_str(), 100.0 * t.probabilities(j));
      if (!input.labels.empty() && t.classes_size() > 0) {
        const bool right = LabelMatches(input.labels[static_cast<size_t>(r)], t.classes(0), t.labels(0));
        correct += right;
        std::printf("  label %s%s", input.labels[static_cast<size_t>(r)].c_str(), right ? "" : "  (wrong)");
      }
      std::printf("\n");
    }
    if (!input.labels.empty()) {
      std::printf("accuracy: %.1f%% (%lld of %d)\n", 100.0 * static_cast<double>(correct) / resp.top_k_size(),
                  static_cast<long long>(correct), resp.top_k_size());
    }
    return 0;
  }
  if (app.got_subcommand("export")) {
    v1::ExportRequest req;
    req.set_model(name);
    req.set_version(version);
    req.set_format(format == "native" ? v1::NATIVE : format == "safetensors" ? v1::SAFETENSORS : v1::ONNX);
    if ((opset != 0 || !dynamic_axes.empty() || verify || fold_batch_norm) && format != "onnx") {
      throw Failure(client::kExitBadInput,
                    "--opset, --dynamic-axis, --verify and --fold-batch-norm apply to --format onnx only");
    }
    req.set_fold_batch_norm(fold_batch_norm);
    req.set_opset(opset);
    req.set_verify(verify);
    for (const std::string& a : dynamic_axes) req.add_dynamic_axes(a);
    auto ctx = Ctx(600);
    auto reader = cli.serving->Export(ctx.get(), req);
    const std::string tmp = out_path + ".part";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Failure(client::kExitFailed, "cannot write \"" + tmp + "\": " + std::strerror(errno));
    v1::ExportChunk c;
    int64_t total = 0, announced = -1;
    std::string sha, verification;
    // Verify with an independent hash of what was written: sha256sum's.
    while (reader->Read(&c)) {
      out.write(c.data().data(), static_cast<std::streamsize>(c.data().size()));
      total += static_cast<int64_t>(c.data().size());
      if (!c.sha256().empty()) {
        sha = c.sha256();
        announced = c.total_bytes();
        verification = c.verification();
      }
    }
    out.close();
    const grpc::Status st = reader->Finish();
    if (!st.ok()) std::remove(tmp.c_str());
    Check(st, "export " + model_ref);
    if (announced != total) {
      std::remove(tmp.c_str());
      throw Failure(client::kExitChecksumMismatch, "export: received " + std::to_string(total) +
                                                       " bytes, the server sent " + std::to_string(announced));
    }
    std::string cmd = "sha256sum '" + tmp + "'";
    std::string local;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[128] = {0};
      if (std::fgets(buf, sizeof(buf), p)) local = std::string(buf).substr(0, 64);
      pclose(p);
    }
    if (local != sha) {
      std::remove(tmp.c_str());
      throw Failure(client::kExitChecksumMismatch,
                    "export: SHA-256 mismatch (server " + sha + ", received " + local + ")");
    }
    std::rename(tmp.c_str(), out_path.c_str());
    std::printf("wrote %s (%lld bytes, sha256 %s)\n", out_path.c_str(), static_cast<long long>(total), sha.c_str());
    if (!verification.empty()) std::printf("verified in %s\n", verification.c_str());
    return 0;
  }
  if (app.got_subcommand("health")) {
    auto health = grpc::health::v1::Health::NewStub(cli.channel);
    grpc::health::v1::HealthCheckResponse resp;
    Check(health->Check(Ctx(5).get(), grpc::health::v1::HealthCheckRequest(), &resp), "health");
    const bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
    if (verbose) {
      v1::ServerInfo info;
      Check(cli.training->GetServerInfo(Ctx(5).get(), v1::GetServerInfoRequest(), &info), "health");
      std::string devices;
      for (const std::string& d : info.devices()) devices += (devices.empty() ? "" : ", ") + d;
      std::printf(
          "version:  %s\ncpu:      %s\nfeatures: %s\nisa:      %s%s\ngemm:     %s\nbf16:     %s\nthreads:  %d (%d CPUs "
          "available)\ndevices:  %s\n",
          info.version().c_str(), info.cpu_model().c_str(), info.cpu_features().c_str(), info.isa().c_str(),
          info.isa() == info.detected_isa()
              ? ""
              : (" (lowered by ANVIL_CPU_ISA; the CPU has " + info.detected_isa() + ")").c_str(),
          info.gemm().c_str(), info.bf16_gemm().c_str(), info.threads(), info.available_cpus(), devices.c_str());
    }
    return serving ? client::kExitOk : client::kExitUnavailable;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const Failure& f) {
    std::fprintf(stderr, "anvil: %s\n", f.what());
    return f.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil: %s\n", e.what());
    return 1;
  }
}
