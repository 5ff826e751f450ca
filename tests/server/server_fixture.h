// An AnvilServer in-process on 127.0.0.1:0 with a real channel to it, and the client-side
// helpers the service tests share (submit, stream, predict, export, plain HTTP).
#pragma once

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/anvil.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "server/server.h"
#include "server/wire_tensor.h"

namespace anvil::server {

namespace fs = std::filesystem;

class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("anvil-server-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    Start();
  }
  void TearDown() override {
    Stop();
    fs::remove_all(root_);
  }

  void Start(ServerOptions o = {}) {
    o.address = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.data_dir = (root_ / "data").string();
    o.limits.predict_message_bytes = std::min<int64_t>(o.limits.predict_message_bytes, 1 << 20);
    o.limits.training_message_bytes = std::min<int64_t>(o.limits.training_message_bytes, 2 << 20);
    o.export_chunk_bytes = 4096;  // exports of tens of KiB span many chunks
    o.max_import_bytes = std::min<int64_t>(o.max_import_bytes, 1 << 20);
    server_ = std::make_unique<AnvilServer>(o);
    server_->start();
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(8 << 20);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    training_ = v1::Training::NewStub(channel_);
    serving_ = v1::Serving::NewStub(channel_);
  }
  void Stop() {
    if (server_) server_->shutdown(std::chrono::seconds(5));
    server_.reset();
  }

  static v1::JobSpec BlobsSpec(int64_t epochs = 3) {
    v1::JobSpec s;
    s.set_name("blobs-mlp");
    s.set_model_preset("mlp");
    s.mutable_dataset()->set_name("blobs");
    s.set_epochs(epochs);
    s.set_batch_size(32);
    s.set_seed(7);
    s.set_metric_interval(5);
    return s;
  }

  v1::Job Submit(const v1::JobSpec& spec, grpc::Status* status = nullptr, bool* created = nullptr) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status st = training_->SubmitJob(&ctx, req, &resp);
    if (status)
      *status = st;
    else
      EXPECT_TRUE(st.ok()) << st.error_message();
    if (created) *created = resp.created();
    return resp.job();
  }

  // Reads the whole stream from `from_step` (ends at a terminal state).
  std::vector<v1::MetricEvent> Stream(const std::string& id, int64_t from_step = 0, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::StreamMetricsRequest req;
    req.set_job_id(id);
    req.set_from_step(from_step);
    auto reader = training_->StreamMetrics(&ctx, req);
    std::vector<v1::MetricEvent> events;
    v1::MetricEvent e;
    while (reader->Read(&e)) events.push_back(e);
    grpc::Status st = reader->Finish();
    if (status)
      *status = st;
    else
      EXPECT_TRUE(st.ok()) << st.error_message();
    return events;
  }

  v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(training_->GetJob(&ctx, req, &job).ok());
    return job;
  }

  grpc::Status Predict(const v1::PredictRequest& req, v1::PredictResponse* resp) {
    grpc::ClientContext ctx;
    return serving_->Predict(&ctx, req, resp);
  }

  static v1::PredictRequest PredictOf(const std::string& model, const Tensor& x) {
    v1::PredictRequest req;
    req.set_model(model);
    encode_tensor(x, "input", req.add_inputs());
    return req;
  }

  // The file Export streams, with the announced size and hash.
  std::string Export(const std::string& model, v1::ExportFormat format, grpc::Status* status, std::string* sha,
                     int64_t* total, int opset = 0, const std::vector<std::string>& dynamic_axes = {},
                     bool verify = false, std::string* verification = nullptr, const std::string& version = "") {
    grpc::ClientContext ctx;
    v1::ExportRequest req;
    req.set_model(model);
    req.set_version(version);
    req.set_format(format);
    req.set_opset(opset);
    for (const std::string& a : dynamic_axes) req.add_dynamic_axes(a);
    req.set_verify(verify);
    auto reader = serving_->Export(&ctx, req);
    std::string bytes;
    v1::ExportChunk c;
    int chunks = 0;
    while (reader->Read(&c)) {
      bytes += c.data();
      ++chunks;
      if (!c.sha256().empty()) {
        *sha = c.sha256();
        *total = c.total_bytes();
        if (verification != nullptr) *verification = c.verification();
      }
    }
    *status = reader->Finish();
    return bytes;
  }

  // RegisterModel with `bytes` in pieces of `piece` bytes; the model's description in *model.
  grpc::Status RegisterModel(const std::string& name, const std::string& bytes, v1::Model* model,
                             const std::vector<std::string>& labels = {}, size_t piece = 8192) {
    grpc::ClientContext ctx;
    auto writer = serving_->RegisterModel(&ctx, model);
    v1::RegisterModelChunk c;
    c.set_name(name);
    for (const std::string& l : labels) c.add_labels(l);
    for (size_t at = 0; at == 0 || at < bytes.size(); at += piece) {
      c.set_data(bytes.substr(at, piece));
      if (!writer->Write(c)) break;
      c.Clear();
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // One unary call with hand-made wire bytes to `method` ("/anvil.v1.Serving/Predict").
  grpc::Status RawCall(const std::string& method, const std::string& bytes, std::string* reply = nullptr) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status st) { done.set_value(std::move(st)); });
    grpc::Status st = done.get_future().get();
    if (reply != nullptr && st.ok()) {
      std::vector<grpc::Slice> slices;
      (void)response.Dump(&slices);
      for (const grpc::Slice& sl : slices) reply->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    return st;
  }

  // Sends `request` as is to 127.0.0.1:<port> and returns the whole response (the server
  // closes): a plain socket, no client library needed.
  static std::string RawHttp(int port, const std::string& request) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string response;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      (void)!::write(fd, request.data(), request.size());
      char buf[65536];
      for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) response.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return response;
  }

  // GET http://127.0.0.1:<port><path>: the body, or "" on failure.
  static std::string HttpGet(int port, const std::string& path, std::string* status_line = nullptr) {
    const std::string response =
        RawHttp(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if (status_line != nullptr) *status_line = response.substr(0, response.find("\r\n"));
    const size_t body = response.find("\r\n\r\n");
    return body == std::string::npos ? "" : response.substr(body + 4);
  }

  // The value of one Prometheus series on this server's /metrics, e.g.
  // `anvil_predict_queue_depth{model="m"}`; 0 when the series is not there (yet).
  double MetricValue(const std::string& series) {
    const std::string text = HttpGet(server_->metrics_port(), "/metrics");
    for (size_t at = 0; (at = text.find(series + " ", at)) != std::string::npos; at += series.size()) {
      if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
    }
    return 0;
  }

  // Waits until `done()` holds, asking every 5 ms for up to `limit`; whether it held. For the
  // service's own observable states (a job RUNNING, a file written), never to order threads.
  template <typename Done>
  static bool WaitUntil(Done done, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  // sha256sum's digest of `bytes` (an implementation independent of the server's).
  std::string Sha256sum(const std::string& bytes) {
    const fs::path p = root_ / "hash-me";
    std::ofstream(p, std::ios::binary) << bytes;
    std::string out;
    if (FILE* f = popen(("sha256sum '" + p.string() + "'").c_str(), "r")) {
      char buf[80] = {0};
      if (std::fgets(buf, sizeof(buf), f)) out = std::string(buf).substr(0, 64);
      pclose(f);
    }
    return out;
  }

  fs::path root_;
  std::unique_ptr<AnvilServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Training::Stub> training_;
  std::unique_ptr<v1::Serving::Stub> serving_;
};

}  // namespace anvil::server
