// anvil: the command-line client of anvild.
//
//   anvil [--server HOST:PORT] [--json] COMMAND ...
//     submit SPEC.json [--watch] [--dry-run]   jobs [--state S]   job ID   watch ID [--from-step N]
//     cancel ID   models   model NAME[:VERSION]   predict NAME[:VERSION] --input FILE [--top-k K]
//     export NAME[:VERSION] --format native|safetensors|onnx -o FILE   health
//
// Exit codes: 0 success; 1 error; 2 bad usage; 3 the watched job failed or was cancelled;
// 4 not found; 5 server unavailable; 6 the exported file's SHA-256 does not match.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "client/input_file.h"
#include "client/progress.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/tokens.h"

namespace {

using namespace anvil;

// The bearer token every call carries ("" = none): --token or $ANVIL_TOKEN.
std::string g_token;

std::string ReadFileOrFail(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string(flag) + ": cannot read \"" + path + "\"");
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
      if (!tls_server_name.empty()) args.SetSslTargetNameOverride(tls_server_name);
    }
    channel = grpc::CreateCustomChannel(server, creds, args);
    training = v1::Training::NewStub(channel);
    serving = v1::Serving::NewStub(channel);
  }
};

class Failure : public std::runtime_error {
 public:
  Failure(int code, const std::string& m) : std::runtime_error(m), code(code) {}
  int code;
};

int ExitCodeOf(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      return 4;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 5;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return 2;
    default:
      return 1;
  }
}

void Check(const grpc::Status& s, const std::string& what) {
  if (!s.ok())
    throw Failure(ExitCodeOf(s), what + ": " + s.error_message() + " (" + std::to_string(s.error_code()) + ")");
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
      throw Failure(5, "watch " + id + ": gave up reconnecting (" +
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
  app.add_option("--server", cli.server, "anvild address (default 127.0.0.1:50051, or $ANVIL_SERVER)")
      ->envname("ANVIL_SERVER");
  app.add_flag("--json", cli.json, "machine-readable output");
  app.add_option("--token", g_token, "bearer token for a server that requires one (or $ANVIL_TOKEN)")
      ->envname("ANVIL_TOKEN");
  app.add_option("--tls-ca", cli.tls_ca, "connect over TLS, trusting this CA (PEM) for the server's certificate")
      ->envname("ANVIL_TLS_CA");
  app.add_option("--tls-cert", cli.tls_cert, "mutual TLS: this client's certificate (PEM)")->envname("ANVIL_TLS_CERT");
  app.add_option("--tls-key", cli.tls_key, "mutual TLS: this client's private key (PEM)")->envname("ANVIL_TLS_KEY");
  app.add_option("--tls-server-name", cli.tls_server_name, "the name on the server's certificate, if not the host");

  std::string spec_path, job_id, model_ref, input_path, out_path, format = "native", state_filter;
  bool watch = false, dry_run = false;
  int64_t from_step = 0, top_k = 3;
  auto* submit = app.add_subcommand("submit", "submit a training job from a JSON spec file");
  submit->add_option("spec", spec_path, "JobSpec as JSON (protobuf JSON mapping)")->required();
  submit->add_flag("--watch", watch, "follow the job until it ends");
  submit->add_flag("--dry-run", dry_run, "validate only");
  auto* jobs = app.add_subcommand("jobs", "list jobs, newest first");
  jobs->add_option("--state", state_filter, "QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or INTERRUPTED");
  auto* job = app.add_subcommand("job", "show one job");
  job->add_option("id", job_id)->required();
  auto* watch_cmd = app.add_subcommand("watch", "follow a job's progress until it ends");
  watch_cmd->add_option("id", job_id)->required();
  watch_cmd->add_option("--from-step", from_step, "replay from this step");
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("id", job_id)->required();
  app.add_subcommand("models", "list served models");
  auto* model = app.add_subcommand("model", "show a model's signature");
  model->add_option("model", model_ref, "NAME[:VERSION]")->required();
  auto* predict = app.add_subcommand("predict", "run a model on inputs from a file");
  predict->add_option("model", model_ref, "NAME[:VERSION]")->required();
  predict->add_option("--input", input_path, "CSV (one sample per row), JSON (array of samples) or an image")
      ->required();
  predict->add_option("--top-k", top_k, "classes to show per sample (default 3)");
  auto* exp = app.add_subcommand("export", "download a model file");
  exp->add_option("model", model_ref, "NAME[:VERSION]")->required();
  exp->add_option("--format", format, "native, safetensors or onnx")
      ->check(CLI::IsMember({"native", "safetensors", "onnx"}));
  exp->add_option("-o,--output", out_path, "file to write")->required();
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
    return app.exit(e) == 0 ? 0 : 2;
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
      throw Failure(4, "token \"" + token_name + "\" is not in " + file);
    }
    return 0;
  }
  cli.Connect();

  if (app.got_subcommand("submit")) {
    std::ifstream in(spec_path);
    if (!in) throw Failure(2, "cannot read \"" + spec_path + "\"");
    std::stringstream text;
    text << in.rdbuf();
    v1::SubmitJobRequest req;
    const auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), req.mutable_spec());
    if (!parsed.ok()) throw Failure(2, spec_path + ": not a valid JobSpec: " + std::string(parsed.message()));
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
      return end == v1::SUCCEEDED ? 0 : 3;
    }
    return 0;
  }
  if (app.got_subcommand("jobs")) {
    v1::ListJobsRequest req;
    if (!state_filter.empty()) {
      v1::JobState s;
      if (!v1::JobState_Parse(state_filter, &s)) throw Failure(2, "--state: unknown state \"" + state_filter + "\"");
      req.add_states(s);
    }
    v1::ListJobsResponse resp;
    Check(cli.training->ListJobs(Ctx().get(), req, &resp), "jobs");
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      for (const v1::Job& j : resp.jobs()) PrintJob(j);
    }
    return 0;
  }
  if (app.got_subcommand("job")) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::Job resp;
    Check(cli.training->GetJob(Ctx().get(), req, &resp), "job " + job_id);
    std::printf("%s\n", ToJson(resp).c_str());
    return 0;
  }
  if (app.got_subcommand("watch")) return Watch(cli, job_id, from_step) == v1::SUCCEEDED ? 0 : 3;
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
  if (app.got_subcommand("models")) {
    v1::ListModelsResponse resp;
    Check(cli.serving->ListModels(Ctx().get(), v1::ListModelsRequest(), &resp), "models");
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
    } else {
      for (const v1::Model& m : resp.models()) {
        std::printf("%s:%lld  job %s  %lld parameters\n", m.name().c_str(), static_cast<long long>(m.version()),
                    m.job_id().c_str(), static_cast<long long>(m.parameters()));
      }
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
    std::printf("%s\n", ToJson(resp).c_str());
    return 0;
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
    *req.add_inputs() = anvil::client::read_input_file(input_path, shape);
    v1::PredictResponse resp;
    Check(cli.serving->Predict(Ctx().get(), req, &resp), "predict " + model_ref);
    if (cli.json) {
      std::printf("%s\n", ToJson(resp).c_str());
      return 0;
    }
    for (int r = 0; r < resp.top_k_size(); ++r) {
      const v1::TopK& t = resp.top_k(r);
      std::printf("sample %d:", r);
      for (int j = 0; j < t.classes_size(); ++j)
        std::printf("  %s (%.1f%%)", t.labels(j).c_str(), 100.0 * t.probabilities(j));
      std::printf("\n");
    }
    return 0;
  }
  if (app.got_subcommand("export")) {
    v1::ExportRequest req;
    req.set_model(name);
    req.set_version(version);
    req.set_format(format == "native" ? v1::NATIVE : format == "safetensors" ? v1::SAFETENSORS : v1::ONNX);
    auto ctx = Ctx(600);
    auto reader = cli.serving->Export(ctx.get(), req);
    const std::string tmp = out_path + ".part";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Failure(1, "cannot write \"" + tmp + "\"");
    v1::ExportChunk c;
    int64_t total = 0, announced = -1;
    std::string sha;
    // Verify with an independent hash of what was written: sha256sum's.
    while (reader->Read(&c)) {
      out.write(c.data().data(), static_cast<std::streamsize>(c.data().size()));
      total += static_cast<int64_t>(c.data().size());
      if (!c.sha256().empty()) {
        sha = c.sha256();
        announced = c.total_bytes();
      }
    }
    out.close();
    const grpc::Status st = reader->Finish();
    if (!st.ok()) std::remove(tmp.c_str());
    Check(st, "export " + model_ref);
    if (announced != total) {
      std::remove(tmp.c_str());
      throw Failure(
          6, "export: received " + std::to_string(total) + " bytes, the server sent " + std::to_string(announced));
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
      throw Failure(6, "export: SHA-256 mismatch (server " + sha + ", received " + local + ")");
    }
    std::rename(tmp.c_str(), out_path.c_str());
    std::printf("wrote %s (%lld bytes, sha256 %s)\n", out_path.c_str(), static_cast<long long>(total), sha.c_str());
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
          "version:  %s\ncpu:      %s\nfeatures: %s\nisa:      %s%s\ngemm:     %s\nthreads:  %d (%d CPUs "
          "available)\ndevices:  %s\n",
          info.version().c_str(), info.cpu_model().c_str(), info.cpu_features().c_str(), info.isa().c_str(),
          info.isa() == info.detected_isa()
              ? ""
              : (" (lowered by ANVIL_CPU_ISA; the CPU has " + info.detected_isa() + ")").c_str(),
          info.gemm().c_str(), info.threads(), info.available_cpus(), devices.c_str());
    }
    return serving ? 0 : 5;
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
