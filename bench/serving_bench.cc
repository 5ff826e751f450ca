// Predict throughput and latency of anvild's serving path, against a bare gRPC echo of the
// same payload on the same machine (the transport ceiling), in one run.
//
// The model is the digits MLP preset, trained here as a one-epoch job through the service;
// a wide MLP (two 4096-unit layers) adds rows where the model, not the RPC, is the cost.
// For 1, 8 and 64 concurrent clients (each its own thread and its own connection, doing
// synchronous unary calls back to back) it reports requests/s and p50/p99 latency for:
//   echo            a Serving.Predict that copies the request's tensor into the reply
//   batching on     anvild, dynamic batching (max batch 64)
//   KServe v2       the same, through inference.GRPCInferenceService/ModelInfer (raw input)
//   batching off    anvild, every request run on its own
// Goals (issue: the service): at 64 clients, batching on >= 60 % of echo's throughput, and
// batching on >= 3x batching off.
//
// Usage: anvil_bench_serving   (bench/run.sh's [threads] [filter] arguments are ignored)
//   ANVIL_DATA_DIR                 where digits.csv.gz is (default ./data; `make data`)
//   ANVIL_BENCH_SERVING_SECONDS    measured seconds per row (default 3)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/kernel_info.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "proto/inference/grpc_service.grpc.pb.h"
#include "server/server.h"
#include "server/wire_tensor.h"

namespace {

namespace fs = std::filesystem;
using namespace anvil;
using Clock = std::chrono::steady_clock;

class EchoService final : public v1::Serving::Service {
 public:
  grpc::Status Predict(grpc::ServerContext*, const v1::PredictRequest* req, v1::PredictResponse* resp) override {
    resp->set_model(req->model());
    for (const v1::Tensor& t : req->inputs()) *resp->add_outputs() = t;
    return grpc::Status::OK;
  }
};

struct Result {
  double rps = 0, p50_us = 0, p99_us = 0;
  int64_t errors = 0;
};

// One client's call, made on its own channel.
using Call = std::function<grpc::Status()>;
using CallOn = std::function<Call(std::shared_ptr<grpc::Channel>)>;

CallOn PredictCall(const v1::PredictRequest& request) {
  return [&request](std::shared_ptr<grpc::Channel> channel) -> Call {
    std::shared_ptr<v1::Serving::Stub> stub = v1::Serving::NewStub(channel);
    return [stub, &request] {
      grpc::ClientContext ctx;
      v1::PredictResponse resp;
      return stub->Predict(&ctx, request, &resp);
    };
  };
}

CallOn ModelInferCall(const inference::ModelInferRequest& request) {
  return [&request](std::shared_ptr<grpc::Channel> channel) -> Call {
    std::shared_ptr<inference::GRPCInferenceService::Stub> stub = inference::GRPCInferenceService::NewStub(channel);
    return [stub, &request] {
      grpc::ClientContext ctx;
      inference::ModelInferResponse resp;
      return stub->ModelInfer(&ctx, request, &resp);
    };
  };
}

Result Load(const std::string& address, int clients, double seconds, const CallOn& call_on) {
  std::vector<Call> calls;
  for (int c = 0; c < clients; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
    calls.push_back(call_on(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  std::atomic<bool> measuring{false}, stop{false};
  std::atomic<int64_t> errors{0};
  std::vector<std::vector<double>> latencies(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (!stop.load()) {
        const auto t0 = Clock::now();
        const grpc::Status st = calls[c]();
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!measuring.load()) continue;
        if (!st.ok()) ++errors;
        latencies[c].push_back(us);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // warm up: connections, first batches
  measuring = true;
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  measuring = false;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  for (auto& t : threads) t.join();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.errors = errors.load();
  if (all.empty()) return r;
  r.rps = static_cast<double>(all.size()) / elapsed;
  r.p50_us = all[all.size() / 2];
  r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  return r;
}

}  // namespace

int main() {
  const char* data_env = std::getenv("ANVIL_DATA_DIR");
  const char* seconds_env = std::getenv("ANVIL_BENCH_SERVING_SECONDS");
  const std::string datasets = data_env != nullptr && *data_env != '\0' ? data_env : "data";
  const double seconds = seconds_env != nullptr ? std::atof(seconds_env) : 3.0;
  const fs::path root = fs::temp_directory_path() / ("anvil-bench-serving-" + std::to_string(::getpid()));
  fs::remove_all(root);

  // The echo server.
  EchoService echo;
  int echo_port = 0;
  grpc::ServerBuilder eb;
  eb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  eb.RegisterService(&echo);
  std::unique_ptr<grpc::Server> echo_server = eb.BuildAndStart();

  // The model: the digits MLP, one epoch, through the service.
  auto start_server = [&](bool batching) {
    server::ServerOptions o;
    o.address = "127.0.0.1:0";
    o.data_dir = root.string();
    o.datasets_dir = datasets;
    o.batching.enabled = batching;
    o.batching.max_batch = 64;
    auto s = std::make_unique<server::AnvilServer>(o);
    s->start();
    return s;
  };
  auto anvild = start_server(true);
  const std::string address = "127.0.0.1:" + std::to_string(anvild->port());
  // Trains `name` (one epoch on digits) through the service; false on failure.
  auto train = [&](const std::string& name, const std::string& preset, const std::string& model_json) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    auto training = v1::Training::NewStub(channel);
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name(name);
    if (!preset.empty()) req.mutable_spec()->set_model_preset(preset);
    if (!model_json.empty()) req.mutable_spec()->set_model_json(model_json);
    req.mutable_spec()->mutable_dataset()->set_name("digits");
    req.mutable_spec()->set_epochs(1);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status st = training->SubmitJob(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "submit %s: %s\n", name.c_str(), st.error_message().c_str());
      return false;
    }
    for (int i = 0; i < 1200; ++i) {
      grpc::ClientContext c;
      v1::GetJobRequest g;
      g.set_job_id(resp.job().id());
      v1::Job job;
      (void)training->GetJob(&c, g, &job);
      if (job.state() == v1::SUCCEEDED) return true;
      if (job.state() == v1::FAILED) {
        std::fprintf(stderr, "training %s failed: %s\n", name.c_str(), job.reason().c_str());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  // The issue's model, and a wide one whose forward (a 4096 x 4096 layer: 64 MiB of weights
  // read per unbatched request) costs more than the RPC, where batching has something to save.
  if (!train("digits-mlp", "mlp", "")) return 1;
  if (!train("digits-wide", "", R"({"input_shape": [1, 8, 8], "layers": [{"type": "flatten"},
      {"type": "linear", "out_features": 4096}, {"type": "relu"}, {"type": "linear", "out_features": 4096},
      {"type": "relu"}, {"type": "linear", "out_features": 10}]})")) {
    return 1;
  }
  v1::PredictRequest request;
  request.set_model("digits-mlp");
  server::encode_tensor(rand({1, 1, 8, 8}), "input", request.add_inputs());
  v1::PredictRequest wide_request = request;
  wide_request.set_model("digits-wide");
  // The same rows as a KServe ModelInfer: the tensor's bytes in raw_input_contents.
  inference::ModelInferRequest infer;
  infer.set_model_name("digits-mlp");
  auto* in = infer.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t d : request.inputs(0).shape()) in->add_shape(d);
  infer.add_raw_input_contents(request.inputs(0).raw());

  struct Row {
    std::string model, mode;
    int clients;
    Result r;
  };
  std::vector<Row> rows;
  const std::vector<int> concurrency = {1, 8, 64};
  for (int c : concurrency) {
    rows.push_back(
        {"digits MLP", "echo", c, Load("127.0.0.1:" + std::to_string(echo_port), c, seconds, PredictCall(request))});
  }
  // Predict and ModelInfer alternate per concurrency, so both meet the machine in the same phase.
  for (int c : concurrency) {
    rows.push_back({"digits MLP", "batching on", c, Load(address, c, seconds, PredictCall(request))});
    rows.push_back({"digits MLP", "KServe v2 ModelInfer", c, Load(address, c, seconds, ModelInferCall(infer))});
  }
  for (int c : {1, 64}) {
    rows.push_back({"wide MLP", "batching on", c, Load(address, c, seconds, PredictCall(wide_request))});
  }
  anvild->shutdown();
  anvild = start_server(false);
  const std::string address_off = "127.0.0.1:" + std::to_string(anvild->port());
  for (int c : concurrency) {
    rows.push_back({"digits MLP", "batching off", c, Load(address_off, c, seconds, PredictCall(request))});
  }
  for (int c : {1, 64}) {
    rows.push_back({"wide MLP", "batching off", c, Load(address_off, c, seconds, PredictCall(wide_request))});
  }
  anvild->shutdown();
  echo_server->Shutdown();

  std::printf("# Predict, digits MLP [1, 1, 8, 8] float32 (256 bytes), %.0f s per row\n\n- kernels: %s\n\n", seconds,
              cpu_kernel_summary().c_str());
  std::printf(
      "| model | mode | clients | requests/s | p50 us | p99 us | errors |\n|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    std::printf("| %s | %s | %d | %.0f | %.0f | %.0f | %lld |\n", row.model.c_str(), row.mode.c_str(), row.clients,
                row.r.rps, row.r.p50_us, row.r.p99_us, static_cast<long long>(row.r.errors));
  }
  auto find = [&](const std::string& model, const std::string& mode, int clients) {
    for (const Row& row : rows) {
      if (row.model == model && row.mode == mode && row.clients == clients) return row.r.rps;
    }
    return 0.0;
  };
  const double on = find("digits MLP", "batching on", 64), off = find("digits MLP", "batching off", 64),
               ceiling = find("digits MLP", "echo", 64);
  std::printf(
      "\nDigits MLP at 64 clients: batching on = %.0f %% of echo (goal >= 60 %%), %.2fx batching off "
      "(goal >= 3x)\n",
      100.0 * on / std::max(ceiling, 1.0), on / std::max(off, 1.0));
  for (int c : concurrency) {
    std::printf("Digits MLP at %d clients: KServe ModelInfer = %.2fx Predict\n", c,
                find("digits MLP", "KServe v2 ModelInfer", c) / std::max(find("digits MLP", "batching on", c), 1.0));
  }
  std::printf("Wide MLP at 64 clients: batching on = %.2fx batching off\n",
              find("wide MLP", "batching on", 64) / std::max(find("wide MLP", "batching off", 64), 1.0));
  fs::remove_all(root);
  return 0;
}
