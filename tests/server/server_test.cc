// The service in-process: an AnvilServer on 127.0.0.1:0 over a real channel. Every RPC, the
// documented status codes, bad inputs, idempotent submission, stream semantics, and a drain
// and restart that resumes a job from its checkpoint to the same weights as an uninterrupted
// run.
#include "server/server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "core/anvil.h"
#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/backend/registry.h"
#include "core/io/safetensors.h"
#include "core/models/archive.h"
#include "core/train/doctor.h"
#include "core/util/fault_point.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/wire_tensor.h"
#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;
using grpc::StatusCode;
using ::testing::HasSubstr;

class ServerTest : public ServerFixture {};

TEST_F(ServerTest, SubmitStreamPredictExport) {
  const v1::Job job = Submit(BlobsSpec());
  ASSERT_FALSE(job.id().empty());
  const std::vector<v1::MetricEvent> events = Stream(job.id());
  ASSERT_FALSE(events.empty());
  // Sequence numbers 1..n without gaps; steps never go back; the last event is the end.
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), static_cast<int64_t>(i + 1));
  int64_t last_step = 0, step_events = 0, epoch_events = 0;
  for (const auto& e : events) {
    EXPECT_GE(e.step(), last_step);
    last_step = e.step();
    step_events += e.has_step_metrics();
    epoch_events += e.has_epoch_metrics();
  }
  EXPECT_EQ(epoch_events, 3);
  EXPECT_GT(step_events, 3);
  ASSERT_EQ(events.back().event_case(), v1::MetricEvent::kState);
  EXPECT_EQ(events.back().state(), v1::SUCCEEDED) << events.back().message();

  const v1::Job done = Get(job.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.model_name(), "blobs-mlp");
  EXPECT_EQ(done.model_version(), 1);
  EXPECT_EQ(done.epoch(), 3);

  // Served at once: 4 blobs points, top-2 classes per row.
  const Tensor x = randn({4, 2});
  v1::PredictRequest req = PredictOf("blobs-mlp", x);
  req.set_top_k(2);
  v1::PredictResponse resp;
  ASSERT_TRUE(Predict(req, &resp).ok());
  ASSERT_EQ(resp.outputs_size(), 1);
  const Tensor y = decode_tensor(resp.outputs(0));
  EXPECT_EQ(y.sizes(), (IntArray{4, 4}));
  ASSERT_EQ(resp.top_k_size(), 4);
  const Tensor p = softmax(y, 1);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(resp.top_k(r).classes(0), argmax(y[r]).item<int64_t>());
    EXPECT_NEAR(resp.top_k(r).probabilities(0), p[r].max().item<double>(), 1e-6);
    EXPECT_GE(resp.top_k(r).probabilities(0), resp.top_k(r).probabilities(1));
  }

  // NATIVE export: the announced hash is sha256sum's, and the C++ API loads the file into a
  // model that gives the served outputs.
  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  const std::string native = Export("blobs-mlp", v1::NATIVE, &st, &sha, &total);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(total, static_cast<int64_t>(native.size()));
  EXPECT_GT(native.size(), 4 * 4096u);  // many chunks
  EXPECT_EQ(sha, Sha256sum(native));
  const fs::path file = root_ / "exported.anvil";
  std::ofstream(file, std::ios::binary) << native;
  models::LoadedModel loaded = models::load_model_archive(file.string());
  Tensor local;
  {
    InferenceMode guard;
    local = loaded.built.module->forward(x);
  }
  EXPECT_TRUE(allclose(local, y, 1e-5, 1e-6));
  EXPECT_EQ(loaded.info.labels.size(), 4u);

  // SAFETENSORS export: weights only, the model's state-dict names.
  const std::string weights = Export("blobs-mlp", v1::SAFETENSORS, &st, &sha, &total);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(sha, Sha256sum(weights));
  const io::Safetensors parsed = io::parse_safetensors(weights, "export");
  EXPECT_EQ(parsed.tensors.size(), loaded.built.module->state_dict().tensors.size());

  // ONNX: a graph whose batch is the symbol "batch" (tests/onnx checks its numerics).
  const std::string graph = Export("blobs-mlp", v1::ONNX, &st, &sha, &total);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(sha, Sha256sum(graph));
  EXPECT_EQ(total, static_cast<int64_t>(graph.size()));
  EXPECT_NE(graph.find("Gemm"), std::string::npos);
  EXPECT_NE(graph.find("batch"), std::string::npos);
  EXPECT_NE(graph.find("anvil.spec"), std::string::npos);
  Export("blobs-mlp", v1::ONNX, &st, &sha, &total, /*opset=*/13);
  EXPECT_TRUE(st.ok()) << st.error_message();
  // Verified in OpenCV DNN before it is sent: the last chunk says by what and how closely.
  std::string verification;
  const std::string verified = Export("blobs-mlp", v1::ONNX, &st, &sha, &total, 0, {}, true, &verification);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(verified, graph);
  EXPECT_NE(verification.find("OpenCV DNN"), std::string::npos) << verification;
  EXPECT_NE(verification.find("at batch 7"), std::string::npos) << verification;
  Export("blobs-mlp", v1::NATIVE, &st, &sha, &total, 0, {}, /*verify=*/true);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  // Bad options: INVALID_ARGUMENT naming what was expected.
  Export("blobs-mlp", v1::ONNX, &st, &sha, &total, /*opset=*/21);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("13 to 17"), std::string::npos) << st.error_message();
  Export("blobs-mlp", v1::ONNX, &st, &sha, &total, 0, {"input:5=seq"});
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("dim 5"), std::string::npos) << st.error_message();
  Export("blobs-mlp", v1::SAFETENSORS, &st, &sha, &total, /*opset=*/13);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);

  // ListModels / GetModel.
  {
    grpc::ClientContext ctx;
    v1::ListModelsResponse models;
    ASSERT_TRUE(serving_->ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
    ASSERT_EQ(models.models_size(), 1);
    EXPECT_EQ(models.models(0).inputs(0).shape_size(), 2);  // [-1, 2]
    EXPECT_EQ(models.models(0).inputs(0).shape(1), 2);
  }
}

// An ONNX file from elsewhere (here: the trained model's own export) registered with
// RegisterModel serves the same predictions; files Anvil cannot serve register nothing.
TEST_F(ServerTest, RegisteredOnnxFilesServeLikeTheModelTheyCameFrom) {
  Stream(Submit(BlobsSpec(1)).id());
  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  const std::string file = Export("blobs-mlp", v1::ONNX, &st, &sha, &total);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::Model model;
  st = RegisterModel("outside", file, &model, {"a", "b", "c", "d"});
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(model.name(), "outside");
  EXPECT_EQ(model.version(), 1);
  EXPECT_EQ(model.job_id(), "");
  ASSERT_EQ(model.inputs_size(), 1);
  EXPECT_EQ(model.inputs(0).shape(1), 2);
  EXPECT_NE(model.spec_json().find("\"format\":\"onnx\""), std::string::npos) << model.spec_json();
  const Tensor x = randn({5, 2});
  v1::PredictRequest a = PredictOf("blobs-mlp", x), b = PredictOf("outside", x);
  b.set_top_k(1);
  v1::PredictResponse ra, rb;
  ASSERT_TRUE(Predict(a, &ra).ok());
  ASSERT_TRUE(Predict(b, &rb).ok());
  EXPECT_TRUE(allclose(decode_tensor(rb.outputs(0)), decode_tensor(ra.outputs(0)), 1e-5, 1e-5));
  EXPECT_TRUE(rb.top_k(0).labels(0) == "a" || rb.top_k(0).labels(0) == "b" || rb.top_k(0).labels(0) == "c" ||
              rb.top_k(0).labels(0) == "d");
  // A second registration is the next version; NATIVE export of it is the file itself.
  ASSERT_TRUE(RegisterModel("outside", file, &model).ok());
  EXPECT_EQ(model.version(), 2);
  EXPECT_EQ(Export("outside", v1::NATIVE, &st, &sha, &total), file);
  ASSERT_TRUE(st.ok()) << st.error_message();

  auto model_count = [&] {
    grpc::ClientContext ctx;
    v1::ListModelsResponse models;
    EXPECT_TRUE(serving_->ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
    return models.models_size();
  };
  const int before = model_count();
  // Garbage, a truncated file, a bad name, a file over the limit: refused, nothing registered.
  st = RegisterModel("junk", "this is not an onnx file", &model);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("nothing was registered"), std::string::npos) << st.error_message();
  st = RegisterModel("junk", file.substr(0, file.size() / 2), &model);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = RegisterModel("../escape", file, &model);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  // Labels name the classifier's 4 outputs, one each: 1 or 5 are refused, saying so.
  for (const std::vector<std::string>& labels :
       std::vector<std::vector<std::string>>{{"a"}, {"a", "b", "c", "d", "e"}}) {
    st = RegisterModel("mislabelled", file, &model, labels);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(),
                HasSubstr("the model gives 4 outputs per row, got " + std::to_string(labels.size())));
  }
  st = RegisterModel("big", std::string((1 << 20) + 1, 'x'), &model, {}, 1 << 18);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(model_count(), before);
  EXPECT_FALSE(fs::exists(root_ / "data" / "imports" / "junk"));
}

TEST_F(ServerTest, PredictRefusesBadInputsWithTheRightCodes) {
  Stream(Submit(BlobsSpec(1)).id());
  auto code_and_message = [&](const v1::PredictRequest& req) {
    v1::PredictResponse resp;
    grpc::Status st = Predict(req, &resp);
    return std::make_pair(st.error_code(), st.error_message());
  };
  // Shape [2, 3] for a [N, 2] model.
  auto [c1, m1] = code_and_message(PredictOf("blobs-mlp", randn({2, 3})));
  EXPECT_EQ(c1, StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(m1, HasSubstr("expects shape [N, 2], got [2, 3]"));
  // Wrong dtype.
  auto [c2, m2] = code_and_message(PredictOf("blobs-mlp", randn({2, 2}, kFloat64)));
  EXPECT_EQ(c2, StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(m2, HasSubstr("expects dtype FLOAT32, got FLOAT64"));
  // A dtype no release defines is named by its number.
  v1::PredictRequest unknown_dtype = PredictOf("blobs-mlp", randn({2, 2}));
  unknown_dtype.mutable_inputs(0)->set_dtype(static_cast<v1::DType>(99));
  EXPECT_THAT(code_and_message(unknown_dtype).second, HasSubstr("expects dtype FLOAT32, got DType(99)"));
  // Byte size that does not match the shape.
  v1::PredictRequest short_bytes = PredictOf("blobs-mlp", randn({2, 2}));
  short_bytes.mutable_inputs(0)->mutable_raw()->resize(15);
  auto [c3, m3] = code_and_message(short_bytes);
  EXPECT_EQ(c3, StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(m3, HasSubstr("needs 16 bytes"));
  // A shape whose product overflows.
  v1::PredictRequest overflow = PredictOf("blobs-mlp", randn({1, 2}));
  overflow.mutable_inputs(0)->set_shape(0, int64_t{1} << 62);
  auto [c4, m4] = code_and_message(overflow);
  EXPECT_EQ(c4, StatusCode::INVALID_ARGUMENT);
  // Missing and extra inputs.
  v1::PredictRequest none;
  none.set_model("blobs-mlp");
  EXPECT_EQ(code_and_message(none).first, StatusCode::INVALID_ARGUMENT);
  v1::PredictRequest two = PredictOf("blobs-mlp", randn({1, 2}));
  *two.add_inputs() = two.inputs(0);
  EXPECT_EQ(code_and_message(two).first, StatusCode::INVALID_ARGUMENT);
  v1::PredictRequest misnamed = PredictOf("blobs-mlp", randn({1, 2}));
  misnamed.mutable_inputs(0)->set_name("pixels");
  EXPECT_THAT(code_and_message(misnamed).second, HasSubstr("no input named \"pixels\""));
  // Unknown model and version; a malformed version.
  EXPECT_EQ(code_and_message(PredictOf("nope", randn({1, 2}))).first, StatusCode::NOT_FOUND);
  v1::PredictRequest v99 = PredictOf("blobs-mlp", randn({1, 2}));
  v99.set_version("99");
  EXPECT_EQ(code_and_message(v99).first, StatusCode::NOT_FOUND);
  v99.set_version("abc");
  EXPECT_EQ(code_and_message(v99).first, StatusCode::INVALID_ARGUMENT);
  // NaN and infinities, named with their place (a row past the first block of 1024 values).
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    Tensor x = randn({700, 2});
    x.data_ptr<float>()[2 * 613 + 1] = bad;
    auto [c, m] = code_and_message(PredictOf("blobs-mlp", x));
    EXPECT_EQ(c, StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(m, HasSubstr(std::string("expects finite values, got ") +
                             (std::isnan(bad) ? "NaN"
                              : bad > 0       ? "inf"
                                              : "-inf") +
                             " in row 613 at element 1"));
  }
  // A message over the server's 1 MiB limit.
  auto [c5, m5] = code_and_message(PredictOf("blobs-mlp", randn({200000, 2})));
  EXPECT_EQ(c5, StatusCode::RESOURCE_EXHAUSTED);
  // The server still serves.
  v1::PredictResponse ok;
  EXPECT_TRUE(Predict(PredictOf("blobs-mlp", randn({3, 2})), &ok).ok());
}

// The Predicts in flight hold at most --max-predict-memory of tensors: a request whose
// activations would pass it gets RESOURCE_EXHAUSTED saying so (before the memory is touched),
// and the same model keeps serving requests that fit.
TEST_F(ServerTest, APredictBeyondTheMemoryBoundIsRefusedAndTheServerKeepsServing) {
  Stop();
  ServerOptions o;
  o.max_predict_memory = 2 << 20;
  Start(o);
  Stream(Submit(BlobsSpec(1)).id());
  v1::PredictResponse resp;
  const grpc::Status big = Predict(PredictOf("blobs-mlp", randn({100000, 2})), &resp);  // 800 KB in
  EXPECT_EQ(big.error_code(), StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  EXPECT_THAT(big.error_message(), HasSubstr("the Predicts in flight would hold more than 2.0 MiB of tensors at once"));
  EXPECT_THAT(big.error_message(), HasSubstr("--max-predict-memory"));
  const grpc::Status small = Predict(PredictOf("blobs-mlp", randn({3, 2})), &resp);
  EXPECT_TRUE(small.ok()) << small.error_message();
  EXPECT_EQ(resp.outputs(0).shape(0), 3);
}

TEST_F(ServerTest, JobCallsAndTheirStatusCodes) {
  grpc::Status st;
  // Path traversal in the dataset: PERMISSION_DENIED, and nothing is created.
  v1::JobSpec escape = BlobsSpec();
  escape.mutable_dataset()->clear_name();
  escape.mutable_dataset()->set_path("../../etc/passwd");
  Submit(escape, &st);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr(root_.string())));
  // A bad field: INVALID_ARGUMENT naming it.
  v1::JobSpec bad = BlobsSpec();
  bad.set_batch_size(-4);
  Submit(bad, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.batch_size"));
  // Dry run: a model that does not fit the data is caught, a good spec is not queued.
  v1::SubmitJobRequest dry;
  *dry.mutable_spec() = BlobsSpec();
  dry.mutable_spec()->clear_model_preset();
  dry.mutable_spec()->set_model_json(R"({"input_shape": [3], "layers": [{"type": "linear", "out_features": 4}]})");
  dry.set_dry_run(true);
  {
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    st = training_->SubmitJob(&ctx, dry, &resp);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("input shape [3] does not match the dataset's samples [2]"));
  }
  // A head with fewer outputs than the dataset's classes (blobs has 4): caught before training.
  dry.mutable_spec()->set_model_json(R"({"input_shape": [2], "layers": [{"type": "linear", "out_features": 3}]})");
  {
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    st = training_->SubmitJob(&ctx, dry, &resp);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("cannot score the dataset's 4 classes"));
  }
  *dry.mutable_spec() = BlobsSpec();
  {
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(training_->SubmitJob(&ctx, dry, &resp).ok());
    EXPECT_TRUE(resp.job().id().empty());
    EXPECT_EQ(resp.job().spec().optimizer().name(), "adamw");  // defaults filled in
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse jobs;
    ASSERT_TRUE(training_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
    EXPECT_EQ(jobs.jobs_size(), 0);
  }
  EXPECT_FALSE(fs::exists(root_ / "data" / "jobs"));

  // Idempotent submission.
  v1::JobSpec spec = BlobsSpec(1);
  spec.set_client_job_id("retry-42");
  bool created = false;
  const v1::Job first = Submit(spec, nullptr, &created);
  EXPECT_TRUE(created);
  const v1::Job again = Submit(spec, nullptr, &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(again.id(), first.id());
  v1::JobSpec changed = spec;  // the same client id with another spec is a conflict
  changed.set_epochs(2);
  Submit(changed, &st);
  EXPECT_EQ(st.error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(st.error_message(), HasSubstr("retry-42"));
  Stream(first.id());

  // Unknown job, cancel of a finished job.
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("job-000000000000");
    v1::Job job;
    EXPECT_EQ(training_->GetJob(&ctx, req, &job).error_code(), StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(first.id());
    v1::Job job;
    EXPECT_EQ(training_->CancelJob(&ctx, req, &job).error_code(), StatusCode::FAILED_PRECONDITION);
  }
  // ListJobs by state.
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.add_states(v1::SUCCEEDED);
    v1::ListJobsResponse jobs;
    ASSERT_TRUE(training_->ListJobs(&ctx, req, &jobs).ok());
    ASSERT_EQ(jobs.jobs_size(), 1);
    EXPECT_EQ(jobs.jobs(0).id(), first.id());
  }
  // Export of a missing model; an unspecified format.
  std::string sha;
  int64_t total = 0;
  Export("nope", v1::NATIVE, &st, &sha, &total);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
  Export("blobs-mlp", v1::EXPORT_FORMAT_UNSPECIFIED, &st, &sha, &total);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  // Health.
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse h;
  ASSERT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &h).ok());
  EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// A spec with a map (the doctor's thresholds): retries of an equal spec are the same job,
// whatever order each copy of the map keeps its entries in (specs are compared as messages).
TEST_F(ServerTest, RetriesOfASpecWithThresholdsAreTheSameJob) {
  grpc::Status st;
  bool created = false;
  v1::JobSpec mapped = BlobsSpec(1);
  mapped.set_client_job_id("retry-43");
  for (const char* name : {"data_stall_warning", "utilisation_p95", "grad_growth", "overfit_margin", "dead_relu_share"})
    (*mapped.mutable_doctor()->mutable_thresholds())[name] = 0.5;
  const v1::Job mapped_first = Submit(mapped, nullptr, &created);
  EXPECT_TRUE(created);
  for (int i = 0; i < 5; ++i) {
    const v1::JobSpec copy = mapped;
    const v1::Job retried = Submit(copy, &st, &created);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_FALSE(created);
    EXPECT_EQ(retried.id(), mapped_first.id());
  }
  Stream(mapped_first.id());
}

TEST_F(ServerTest, CancellingAStreamDoesNotCancelTheJobButCancelJobDoes) {
  v1::JobSpec spec = BlobsSpec(400);
  spec.set_metric_interval(1);
  const v1::Job job = Submit(spec);
  {
    grpc::ClientContext ctx;
    v1::StreamMetricsRequest req;
    req.set_job_id(job.id());
    auto reader = training_->StreamMetrics(&ctx, req);
    v1::MetricEvent e;
    int steps = 0;
    while (steps < 3 && reader->Read(&e)) steps += e.has_step_metrics();
    ctx.TryCancel();
    reader->Finish();
  }
  // The job goes on training after the stream is gone: a new stream sees further steps.
  const int64_t step_at_cancel = Get(job.id()).step();
  {
    grpc::ClientContext ctx;
    v1::StreamMetricsRequest req;
    req.set_job_id(job.id());
    req.set_from_step(step_at_cancel + 1);
    auto reader = training_->StreamMetrics(&ctx, req);
    v1::MetricEvent e;
    int steps = 0;
    while (steps < 3 && reader->Read(&e)) steps += e.has_step_metrics();
    EXPECT_EQ(steps, 3);
    ctx.TryCancel();
    reader->Finish();
  }
  EXPECT_EQ(Get(job.id()).state(), v1::RUNNING);
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(job.id());
    v1::Job resp;
    ASSERT_TRUE(training_->CancelJob(&ctx, req, &resp).ok());
    // The reply waited for the job's terminal event (its steps take milliseconds): it says how
    // the job ended, not RUNNING.
    EXPECT_EQ(resp.state(), v1::CANCELLED) << resp.reason();
  }
  const std::vector<v1::MetricEvent> events = Stream(job.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), v1::CANCELLED);
  EXPECT_EQ(Get(job.id()).state(), v1::CANCELLED);
}

// The CPU and kernels the server runs with: GetServerInfo and the anvil_cpu_info series
// agree with each other and with the engine's own probe.
TEST_F(ServerTest, ServerInfoAndTheCpuInfoMetricNameTheCpuLevelAndGemm) {
  v1::ServerInfo info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(training_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  }
  const CpuKernelInfo cpu = cpu_kernel_info();
  EXPECT_EQ(info.cpu_model(), cpu_features().model_name);
  EXPECT_EQ(info.isa(), std::string(isa_name(cpu::active_isa())));
  EXPECT_EQ(info.detected_isa(), std::string(isa_name(detected_isa())));
  EXPECT_EQ(info.gemm(), cpu::selected_gemm_description());
  EXPECT_EQ(info.bf16_gemm(), cpu::bf16_gemm_kernel_name());
  EXPECT_EQ(info.threads(), get_num_threads());
  EXPECT_GE(info.available_cpus(), 1);
  EXPECT_FALSE(info.version().empty());
  ASSERT_GE(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0), "cpu");
  ASSERT_GT(server_->metrics_port(), 0);
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(text, HasSubstr("# TYPE anvil_cpu_info gauge"));
  EXPECT_THAT(text, HasSubstr("isa=\"" + info.isa() + "\""));
  EXPECT_THAT(text, HasSubstr("gemm=\"" + info.gemm() + "\""));
  EXPECT_THAT(text, HasSubstr("bf16_gemm=\"" + info.bf16_gemm() + "\""));
  EXPECT_THAT(text, HasSubstr("threads=\"" + std::to_string(info.threads()) + "\""));
}

// /metrics after a job and some predictions: every family, valid exposition (promtool).
TEST_F(ServerTest, MetricsEndpointServesEveryFamilyAndPassesPromtool) {
  ASSERT_GT(server_->metrics_port(), 0);
  Stream(Submit(BlobsSpec(2)).id());
  v1::PredictResponse resp;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Predict(PredictOf("blobs-mlp", randn({3, 2})), &resp).ok());
  EXPECT_FALSE(Predict(PredictOf("blobs-mlp", randn({3, 5})), &resp).ok());
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  for (const char* family : {"anvil_job_loss",
                             "anvil_job_grad_norm",
                             "anvil_job_learning_rate",
                             "anvil_job_step",
                             "anvil_job_epoch",
                             "anvil_job_samples_per_second",
                             "anvil_job_data_wait_ratio",
                             "anvil_job_val_accuracy_ratio",
                             "anvil_job_step_duration_seconds",
                             "anvil_jobs",
                             "anvil_jobs_finished_total",
                             "anvil_predict_requests_total",
                             "anvil_predict_latency_seconds",
                             "anvil_predict_queue_seconds",
                             "anvil_predict_batch_rows",
                             "anvil_predict_in_flight",
                             "anvil_predict_queue_depth",
                             "anvil_models_loaded",
                             "anvil_device_busy_seconds_total",
                             "anvil_device_busy_ratio",
                             "anvil_allocator_allocated_bytes",
                             "anvil_allocator_reserved_bytes",
                             "process_cpu_seconds_total",
                             "process_resident_memory_bytes",
                             "process_start_time_seconds",
                             "anvil_build_info",
                             "anvil_cpu_info"}) {
    EXPECT_THAT(text, HasSubstr(std::string("# TYPE ") + family + " ")) << family;
  }
  EXPECT_THAT(text, HasSubstr("anvil_predict_requests_total{code=\"OK\",model=\"blobs-mlp\"} 5"));
  EXPECT_THAT(text, HasSubstr("anvil_predict_requests_total{code=\"INVALID_ARGUMENT\",model=\"blobs-mlp\"} 1"));
  EXPECT_THAT(text, HasSubstr("anvil_jobs_finished_total{outcome=\"succeeded\"} 1"));
  EXPECT_THAT(text, HasSubstr("anvil_jobs{state=\"SUCCEEDED\"} 1"));
  EXPECT_THAT(text, HasSubstr("anvil_job_epoch{job="));
  // The status page and its data; an unknown path is a 404 and the endpoint keeps serving.
  std::string status;
  EXPECT_THAT(HttpGet(server_->metrics_port(), "/", &status), HasSubstr("<title>Anvil</title>"));
  EXPECT_THAT(status, HasSubstr("200"));
  const std::string json = HttpGet(server_->metrics_port(), "/status.json");
  EXPECT_THAT(json, HasSubstr("\"name\":\"blobs-mlp\""));
  EXPECT_THAT(json, HasSubstr("\"train_loss\":[["));
  HttpGet(server_->metrics_port(), "/favicon.ico", &status);
  EXPECT_THAT(status, HasSubstr("404"));
  EXPECT_THAT(HttpGet(server_->metrics_port(), "/metrics"), HasSubstr("# TYPE anvil_jobs gauge"));
  // Prometheus's own checker accepts the exposition.
  const fs::path file = root_ / "metrics.txt";
  std::ofstream(file) << text;
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    EXPECT_EQ(std::system(("promtool check metrics < '" + file.string() + "'").c_str()), 0);
  } else {
    ADD_FAILURE() << "promtool is missing (make deps installs Debian's prometheus package)";
  }
}

// int8 quantization after training (JobSpec.quantize): the int8 version is registered beside
// the float one when it passes the accuracy gate, GetModel shows its precision, size and both
// accuracies, Predict serves it through the same batching, and the archive it exports
// computes what was served. A spec the service does not know is INVALID_ARGUMENT naming it.
TEST_F(ServerTest, QuantizedJobsRegisterAnInt8VersionBesideTheFloatOne) {
  for (const std::string mode : {"static", "dynamic"}) {
    v1::JobSpec spec = BlobsSpec(3);
    spec.set_name("q-" + mode);
    spec.set_register_model("q-" + mode);
    spec.mutable_quantize()->set_mode(mode);
    spec.mutable_quantize()->set_max_accuracy_drop(5.0);
    const v1::Job job = Submit(spec);
    ASSERT_FALSE(job.id().empty());
    EXPECT_EQ(job.spec().quantize().observer(), "histogram");  // defaults written back
    EXPECT_EQ(job.spec().quantize().calibration_batches(), 16);
    const std::vector<v1::MetricEvent> events = Stream(job.id());
    ASSERT_FALSE(events.empty());
    ASSERT_EQ(events.back().state(), v1::SUCCEEDED) << events.back().message();
    EXPECT_THAT(events.back().message(), HasSubstr("its int8 version 2 too"));
    EXPECT_THAT(Get(job.id()).reason(), ::testing::StartsWith("int8 version 2 registered: int8 (" + mode + ")"));
    EXPECT_THAT(events.back().message(), HasSubstr("int8 (" + mode + ") accuracy "));

    v1::Model float_model, int8_model;
    for (const auto& [version, out] : {std::pair<std::string, v1::Model*>{"1", &float_model}, {"2", &int8_model}}) {
      grpc::ClientContext ctx;
      v1::GetModelRequest get;
      get.set_name("q-" + mode);
      get.set_version(version);
      ASSERT_TRUE(serving_->GetModel(&ctx, get, out).ok());
    }
    EXPECT_EQ(float_model.precision(), "fp32");
    EXPECT_EQ(int8_model.precision(), "int8");
    EXPECT_EQ(int8_model.quantization(),
              mode == "static" ? "static (histogram, 16 calibration batches)" : std::string("dynamic"));
    ASSERT_TRUE(int8_model.accuracy().count("fp32") && int8_model.accuracy().count("int8"));
    EXPECT_GE(int8_model.accuracy().at("int8"), int8_model.accuracy().at("fp32") - 0.05);
    EXPECT_EQ(float_model.accuracy().at("int8"), int8_model.accuracy().at("int8"));
    EXPECT_GT(int8_model.size_bytes(), 0);
    EXPECT_LT(int8_model.size_bytes(), float_model.size_bytes());
    // The MLP's Linears hold the same weights and biases in int8 (no BatchNorm to fold).
    EXPECT_GT(float_model.parameters(), 0);
    EXPECT_EQ(int8_model.parameters(), float_model.parameters());

    const Tensor x = randn({5, 2});
    v1::PredictRequest req = PredictOf("q-" + mode, x);
    req.set_version("2");
    v1::PredictResponse resp;
    ASSERT_TRUE(Predict(req, &resp).ok());
    EXPECT_EQ(resp.version(), 2);
    const Tensor served = decode_tensor(resp.outputs(0));
    v1::PredictRequest req1 = PredictOf("q-" + mode, x);
    req1.set_version("1");
    v1::PredictResponse resp1;
    ASSERT_TRUE(Predict(req1, &resp1).ok());
    const Tensor float_served = decode_tensor(resp1.outputs(0));
    EXPECT_LT((served - float_served).abs().max().item<double>(), 0.5) << "int8 strays from float32";
    EXPECT_FALSE(equal(served, float_served)) << "the int8 version computed the float32 outputs";
    grpc::Status st;
    std::string sha;
    int64_t total = 0;
    const std::string native = Export("q-" + mode, v1::NATIVE, &st, &sha, &total);  // latest: the int8 version
    ASSERT_TRUE(st.ok()) << st.error_message();
    const fs::path file = root_ / ("q-" + mode + ".anvil");
    std::ofstream(file, std::ios::binary) << native;
    models::LoadedModel loaded = models::load_model_archive(file.string());
    EXPECT_EQ(loaded.info.precision, "int8");
    {
      InferenceMode guard;
      EXPECT_TRUE(equal(loaded.built.module->forward(x), served));
    }
    // Its SAFETENSORS export holds the same tensors as its archive: the int8 weights with their
    // scale companions beside the float layers' state, not the float state alone.
    const std::string weights = Export("q-" + mode, v1::SAFETENSORS, &st, &sha, &total);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const io::Safetensors exported = io::parse_safetensors(weights, "export"),
                          archived = io::parse_safetensors(native, "archive");
    ASSERT_EQ(exported.tensors.size(), archived.tensors.size());
    int int8_tensors = 0;
    for (const auto& [name, t] : archived.tensors) {
      const Tensor* e = exported.find(name);
      ASSERT_NE(e, nullptr) << name << " is in the archive, not in the safetensors export";
      EXPECT_TRUE(equal(*e, t)) << name;
      int8_tensors += t.dtype() == kInt8;
    }
    EXPECT_GT(int8_tensors, 0);
    // The int8 version exports as QDQ ONNX (docs/onnx.md).
    const std::string onnx = Export("q-" + mode, v1::ONNX, &st, &sha, &total);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_NE(onnx.find(mode == "static" ? "QuantizeLinear" : "DynamicQuantizeLinear"), std::string::npos);
    // Verified on request: by Anvil's importer, as OpenCV DNN 4.6 cannot load QDQ graphs.
    std::string verified;
    Export("q-" + mode, v1::ONNX, &st, &sha, &total, 0, {}, true, &verified);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_THAT(verified, HasSubstr("Anvil's ONNX importer (OpenCV DNN 4.6 cannot load QDQ int8 graphs): max |error|"));
  }
  // Serving.Quantize on a registered float version: calibrated on the training job's dataset.
  {
    grpc::ClientContext ctx;
    v1::QuantizeRequest req;
    req.set_model("q-static");
    req.set_version("1");
    req.mutable_spec()->set_mode("static");
    req.mutable_spec()->set_observer("minmax");
    req.mutable_spec()->set_max_accuracy_drop(5.0);
    v1::QuantizeResponse resp;
    const grpc::Status st = serving_->Quantize(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(resp.registered()) << resp.message();
    EXPECT_EQ(resp.model().version(), 3);
    EXPECT_EQ(resp.model().precision(), "int8");
    EXPECT_EQ(resp.model().quantization(), "static (minmax, 16 calibration batches)");
    EXPECT_GT(resp.float_accuracy(), 0.5);
    ASSERT_GT(resp.layers_size(), 0);
    EXPECT_EQ(resp.layers(0).type(), "QuantizedLinear");
    for (int i = 1; i < resp.layers_size(); ++i) EXPECT_LE(resp.layers(i - 1).sqnr_db(), resp.layers(i).sqnr_db());
    // An int8 version is not quantized again; an unknown model is NOT_FOUND.
    grpc::ClientContext ctx2;
    req.set_version("3");
    EXPECT_EQ(serving_->Quantize(&ctx2, req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    grpc::ClientContext ctx3;
    req.set_model("nope");
    EXPECT_EQ(serving_->Quantize(&ctx3, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
    grpc::ClientContext ctx4;
    req.set_model("q-static");
    req.set_version("1");
    req.mutable_spec()->set_mode("int4");
    const grpc::Status bad = serving_->Quantize(&ctx4, req, &resp);
    EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(bad.error_message(), HasSubstr("spec.mode: expected"));
  }
  // An imported ONNX graph (q-static's float version exported and registered back) quantizes
  // dynamically, or statically on a dataset the request names; each int8 version is a QDQ
  // graph served on the int8 kernels, and its file carries the quantization and both
  // accuracies.
  {
    grpc::Status st;
    std::string sha;
    int64_t total = 0;
    const std::string fp32 = Export("q-static", v1::ONNX, &st, &sha, &total, 0, {}, false, nullptr, "1");
    ASSERT_TRUE(st.ok()) << st.error_message();
    v1::Model model;
    ASSERT_TRUE(RegisterModel("q-onnx", fp32, &model).ok());
    grpc::ClientContext ctx;
    v1::QuantizeRequest req;
    req.set_model("q-onnx");
    req.mutable_spec()->set_mode("static");
    req.mutable_spec()->set_observer("minmax");
    req.mutable_spec()->set_max_accuracy_drop(5.0);
    v1::QuantizeResponse resp;
    // No dataset: an imported graph has no job to take one from.
    grpc::Status no_data = serving_->Quantize(&ctx, req, &resp);
    EXPECT_EQ(no_data.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(no_data.error_message(), HasSubstr("give the dataset"));
    req.mutable_dataset()->set_name("blobs");
    req.set_seed(BlobsSpec().seed());  // the blobs q-static was trained on
    // Dynamic: the Gemms rewritten into DynamicQuantizeLinear -> MatMulInteger, which the
    // importer runs on the int8 kernels; no calibration.
    grpc::ClientContext ctx_dynamic;
    req.mutable_spec()->set_mode("dynamic");
    const grpc::Status dynamic = serving_->Quantize(&ctx_dynamic, req, &resp);
    ASSERT_TRUE(dynamic.ok()) << dynamic.error_message();
    EXPECT_TRUE(resp.registered()) << resp.message();
    EXPECT_THAT(resp.message(), HasSubstr("of the graph's nodes in int8"));
    EXPECT_EQ(resp.model().version(), 2);
    EXPECT_EQ(resp.model().precision(), "int8");
    EXPECT_EQ(resp.model().quantization(), "dynamic");
    EXPECT_GT(resp.int8_accuracy(), resp.float_accuracy() - 0.05);
    req.mutable_spec()->set_mode("static");
    req.set_version("1");  // the latest is int8 now
    grpc::ClientContext ctx2;
    const grpc::Status ok = serving_->Quantize(&ctx2, req, &resp);
    ASSERT_TRUE(ok.ok()) << ok.error_message();
    EXPECT_TRUE(resp.registered()) << resp.message();
    EXPECT_THAT(resp.message(), HasSubstr("of the graph's nodes in int8"));
    EXPECT_EQ(resp.model().version(), 3);
    EXPECT_EQ(resp.model().precision(), "int8");
    EXPECT_EQ(resp.model().quantization(), "static (minmax, 16 calibration batches)");
    EXPECT_GT(resp.float_accuracy(), 0.5);
    EXPECT_GT(resp.int8_accuracy(), resp.float_accuracy() - 0.05);
    // Served beside the float version, within int8 error of it.
    const Tensor x = randn({8, 2});
    auto predict = [&](const std::string& version) {
      v1::PredictRequest p = PredictOf("q-onnx", x);
      p.set_version(version);
      v1::PredictResponse r;
      const grpc::Status s = Predict(p, &r);
      EXPECT_TRUE(s.ok()) << s.error_message();
      return s.ok() ? decode_tensor(r.outputs(0)) : zeros({8, 1});
    };
    const Tensor f = predict("1"), d = predict("2"), q = predict("3");
    EXPECT_LT((f - d).abs().max().item<double>(), 0.05 * f.abs().max().item<double>() + 0.05);
    EXPECT_LT((f - q).abs().max().item<double>(), 0.05 * f.abs().max().item<double>() + 0.05);
    // The int8 graphs quantize no further.
    for (const char* version : {"2", "3"}) {
      grpc::ClientContext ctx3;
      req.set_version(version);
      EXPECT_EQ(serving_->Quantize(&ctx3, req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    }
  }
  grpc::Status st;
  v1::JobSpec bad = BlobsSpec(1);
  bad.mutable_quantize()->set_mode("int4");
  Submit(bad, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("quantize.mode: expected \"dynamic\""));
  bad.mutable_quantize()->set_mode("static");
  bad.mutable_quantize()->set_observer("percentile");
  Submit(bad, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("quantize.observer"));
}

// Quantize's data and spec, refused before anything is registered or left on disk: NaN and
// infinite inputs (which made every scale NaN), an explicit max_accuracy_drop of 0 (taken as
// unset before), the request's own field names, and an imported graph's file changed on disk.
TEST_F(ServerTest, QuantizeRefusesNonFiniteDataAndKeepsAnExplicitZeroLimit) {
  Stream(Submit(BlobsSpec(2)).id());  // blobs-mlp: 2 features, 4 classes
  const fs::path data = root_ / "data";
  std::string rows = "a,b,label\n";
  for (int i = 0; i < 64; ++i)
    rows += std::to_string(i % 7 - 3) + "," + std::to_string(i % 5 - 2) + "," + std::to_string(i % 4) + "\n";
  std::ofstream(data / "finite.csv") << rows;
  std::ofstream(data / "nan.csv") << rows << "nan,1,0\n";
  std::ofstream(data / "inf.csv") << rows << "1,1e39,2\n";  // 1e39 overflows float32 to inf
  const auto quantize = [&](const std::string& model, const std::string& csv, const std::string& mode,
                            v1::QuantizeResponse* resp, std::optional<double> max_drop = std::nullopt) {
    grpc::ClientContext ctx;
    v1::QuantizeRequest req;
    req.set_model(model);
    req.set_version("1");
    req.mutable_spec()->set_mode(mode);
    if (max_drop) req.mutable_spec()->set_max_accuracy_drop(*max_drop);
    req.mutable_dataset()->set_path(csv);
    req.mutable_dataset()->set_label_column("label");
    return serving_->Quantize(&ctx, req, resp);
  };
  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  v1::Model imported;
  ASSERT_TRUE(RegisterModel("imported", Export("blobs-mlp", v1::ONNX, &st, &sha, &total), &imported).ok());
  for (const std::string model : {"blobs-mlp", "imported"}) {
    for (const std::string mode : {"static", "dynamic"}) {
      SCOPED_TRACE(model + " " + mode);
      v1::QuantizeResponse resp;
      const grpc::Status nan = quantize(model, "nan.csv", mode, &resp);
      EXPECT_EQ(nan.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << nan.error_message();
      EXPECT_THAT(nan.error_message(), HasSubstr("holds NaN"));
      EXPECT_THAT(nan.error_message(), HasSubstr("int8 quantization needs finite inputs; nothing was registered"));
      const grpc::Status inf = quantize(model, "inf.csv", mode, &resp);
      EXPECT_EQ(inf.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << inf.error_message();
      EXPECT_THAT(inf.error_message(), HasSubstr("holds an infinite value"));
    }
  }
  // Nothing registered, and nothing left in the quantized folder (no archive, no checksum).
  for (const std::string model : {"blobs-mlp", "imported"}) {
    grpc::ClientContext ctx;
    v1::GetModelRequest get;
    get.set_name(model);
    get.set_version("2");
    v1::Model m;
    EXPECT_EQ(serving_->GetModel(&ctx, get, &m).error_code(), grpc::StatusCode::NOT_FOUND) << model;
  }
  if (fs::exists(data / "quantized"))
    for (const auto& e : fs::directory_iterator(data / "quantized")) ADD_FAILURE() << "left behind: " << e.path();
  // An explicit limit of 0 points stays 0; unset is 1.
  v1::QuantizeResponse zero, unset;
  ASSERT_TRUE(quantize("blobs-mlp", "finite.csv", "static", &zero, 0.0).ok());
  EXPECT_THAT(zero.message(), HasSubstr("(limit 0.00)"));
  ASSERT_TRUE(quantize("blobs-mlp", "finite.csv", "", &unset).ok());  // an empty mode is static
  EXPECT_THAT(unset.message(), HasSubstr("int8 (static)"));
  EXPECT_THAT(unset.message(), HasSubstr("(limit 1.00)"));
  // Calibrated on data unlike the training data (every feature 0), a trained model's int8
  // version is still gated on its job's validation split: the float accuracy reported is the
  // job's (blobs: well above the 25 % that guessing the request's labels would give).
  std::string zeros = "a,b,label\n";
  for (int i = 0; i < 64; ++i) zeros += "0,0," + std::to_string(i % 4) + "\n";
  std::ofstream(data / "zeros.csv") << zeros;
  v1::QuantizeResponse gated;
  ASSERT_TRUE(quantize("blobs-mlp", "zeros.csv", "static", &gated, 100.0).ok());
  EXPECT_THAT(gated.message(), HasSubstr("(gated on the validation split of job "));
  EXPECT_GT(gated.float_accuracy(), 0.6);
  // Labels the graph has no output for: refused, as for a trained model.
  std::string twelve = "a,b,label\n";
  for (int i = 0; i < 64; ++i) twelve += std::to_string(i % 3) + ",1," + std::to_string(i % 12) + "\n";
  std::ofstream(data / "twelve.csv") << twelve;
  v1::QuantizeResponse classes;
  const grpc::Status too_many = quantize("imported", "twelve.csv", "static", &classes);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.error_message(), HasSubstr("gives 4 outputs per sample, which cannot score the dataset's 12"));
  // The request's fields are named as the request has them.
  v1::QuantizeResponse resp;
  const grpc::Status missing = quantize("blobs-mlp", "missing.csv", "static", &resp);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing.error_message(), ::testing::StartsWith("dataset.path: "));
  const grpc::Status drop = quantize("blobs-mlp", "finite.csv", "static", &resp, -1.0);
  EXPECT_THAT(drop.error_message(), ::testing::StartsWith("spec.max_accuracy_drop: expected"));
  // An imported graph whose file changed on disk since it was registered: DATA_LOSS.
  fs::path path;
  for (const auto& e : fs::directory_iterator(data / "imports"))
    if (e.path().filename().string().rfind("imported-", 0) == 0) path = e.path();
  ASSERT_FALSE(path.empty());
  fs::resize_file(path, fs::file_size(path) / 2);
  const grpc::Status changed = quantize("imported", "finite.csv", "static", &resp);
  EXPECT_EQ(changed.error_code(), grpc::StatusCode::DATA_LOSS) << changed.error_message();
  EXPECT_THAT(changed.error_message(), HasSubstr("changed on disk since it was registered"));
}

// The STALLED watchdog: a run that sends no event for longer than stalled_after (a step that
// hangs: the train:hang fault point) gets one STALLED finding, streamed, stored and counted,
// while it is still running; a healthy job under the same watchdog gets none.
TEST_F(ServerTest, ARunThatSendsNothingIsStalledAndAHealthyOneIsNot) {
  Stop();
  ServerOptions o;
  o.stalled_after = std::chrono::seconds(2);
  Start(o);
  const auto stalled_codes = [](const std::vector<v1::MetricEvent>& events) {
    int64_t n = 0;
    for (const auto& e : events) n += e.has_finding() && e.finding().code() == "STALLED" ? 1 : 0;
    return n;
  };
  EXPECT_EQ(stalled_codes(Stream(Submit(BlobsSpec(2)).id())), 0);
  set_fault_point("train:hang=fire");
  v1::JobSpec spec = BlobsSpec(2);
  spec.set_name("hangs");
  const v1::Job job = Submit(spec);
  v1::GetFindingsResponse found;
  const bool stalled = WaitUntil(
      [&] {
        grpc::ClientContext ctx;
        v1::GetFindingsRequest req;
        req.set_job_id(job.id());
        found.Clear();
        if (!training_->GetFindings(&ctx, req, &found).ok()) return false;
        for (const v1::Finding& f : found.findings())
          if (f.code() == "STALLED") return true;
        return false;
      },
      std::chrono::seconds(30));
  EXPECT_EQ(Get(job.id()).state(), v1::RUNNING);
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(job.id());
    v1::Job resp;
    EXPECT_TRUE(training_->CancelJob(&ctx, req, &resp).ok());
  }
  set_fault_point("");
  ASSERT_TRUE(stalled) << "no STALLED finding within 30 s";
  const std::vector<v1::MetricEvent> events = Stream(job.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), v1::CANCELLED);
  EXPECT_EQ(stalled_codes(events), 1);
  for (const v1::Finding& f : found.findings()) {
    if (f.code() != "STALLED") continue;
    EXPECT_EQ(f.severity(), "warning");
    ASSERT_GE(f.evidence_size(), 1);
    EXPECT_EQ(f.evidence(0).name(), "seconds_without_an_event");
    EXPECT_GE(f.evidence(0).value(), 2.0);
    EXPECT_THAT(f.advice(), HasSubstr("stuck, not slow"));
  }
  EXPECT_THAT(HttpGet(server_->metrics_port(), "/metrics"),
              HasSubstr("anvil_job_findings_total{code=\"STALLED\",severity=\"warning\"} 1"));
}

// The training doctor through the service: a job with a learning rate far too high fires a
// gradient or divergence finding, streamed as a finding event, stored with the job (GetFindings
// returns it with its evidence and the rules that stayed quiet) and counted in /metrics; the
// same job at the default rate fires neither.
TEST_F(ServerTest, TheDoctorsFindingsAreStreamedStoredAndCounted) {
  for (const bool faulty : {true, false}) {
    v1::JobSpec spec = BlobsSpec(3);
    spec.set_name(faulty ? "doctor-lr" : "doctor-ok");
    spec.set_register_model(spec.name());
    spec.set_metric_interval(2);
    spec.mutable_optimizer()->set_name("sgd");
    spec.mutable_optimizer()->set_lr(faulty ? 10.0 : 0.05);
    const v1::Job job = Submit(spec);
    ASSERT_FALSE(job.id().empty());
    const std::vector<v1::MetricEvent> events = Stream(job.id());
    ASSERT_FALSE(events.empty());
    std::set<std::string> streamed;
    for (const auto& e : events)
      if (e.has_finding()) streamed.insert(e.finding().code());
    grpc::ClientContext ctx;
    v1::GetFindingsRequest req;
    req.set_job_id(job.id());
    v1::GetFindingsResponse resp;
    ASSERT_TRUE(training_->GetFindings(&ctx, req, &resp).ok());
    std::set<std::string> stored;
    for (const v1::Finding& f : resp.findings()) {
      stored.insert(f.code());
      EXPECT_FALSE(f.advice().empty()) << f.code();
      EXPECT_GT(f.evidence_size(), 0) << f.code();
    }
    EXPECT_EQ(stored, streamed);
    const bool fired = stored.count("EXPLODING_GRADIENTS") + stored.count("LR_TOO_HIGH") > 0;
    EXPECT_EQ(fired, faulty) << ::testing::PrintToString(stored);
    // Every rule that applies to this job (not STRAGGLER_RANK: one rank; not AMP_SKIP_STORM:
    // float32; not LOGITS_PASSED_AS_PROBABILITIES: cross entropy) is in exactly one list:
    // found, checked and healthy, or not checked with what it needs. Healthy means checked:
    // each healthy rule but the watchdog's STALLED came in a streamed "checked" event.
    std::set<std::string> streamed_checked;
    for (const auto& e : events)
      if (e.has_checked()) streamed_checked.insert(e.checked().codes().begin(), e.checked().codes().end());
    std::multiset<std::string> listed(stored.begin(), stored.end());
    for (const std::string& h : resp.healthy()) {
      listed.insert(h);
      if (h != "STALLED") {
        EXPECT_EQ(streamed_checked.count(h), 1u) << h << " is healthy without being checked";
      }
    }
    int64_t intervals_after_warmup = 0;
    for (const auto& e : events) intervals_after_warmup += e.has_step_metrics() && e.step() >= 20;
    for (const v1::UncheckedRule& u : resp.not_checked()) {
      listed.insert(u.code());
      EXPECT_FALSE(u.needs().empty()) << u.code();
      EXPECT_EQ(streamed_checked.count(u.code()), 0u) << u.code();
    }
    std::multiset<std::string> applicable;
    for (const std::string& rule : train::Doctor::rules())
      if (rule != "STRAGGLER_RANK" && rule != "AMP_SKIP_STORM" && rule != "LOGITS_PASSED_AS_PROBABILITIES")
        applicable.insert(rule);
    EXPECT_EQ(listed, applicable);
    EXPECT_EQ(std::count(resp.healthy().begin(), resp.healthy().end(), "STALLED"), 1);
    // The utilisation window is ten intervals after warm-up: a job with fewer has not had it.
    if (intervals_after_warmup < 10) {
      bool unchecked = false;
      for (const v1::UncheckedRule& u : resp.not_checked())
        if (u.code() == "LOW_DEVICE_UTILISATION") {
          unchecked = true;
          EXPECT_THAT(u.needs(), HasSubstr("10 metric intervals after warm-up"));
        }
      EXPECT_TRUE(unchecked) << intervals_after_warmup << " intervals after warm-up";
    }
    if (faulty) {
      // Most severe first.
      for (int i = 1; i < resp.findings_size(); ++i) {
        const auto rank = [](const std::string& s) { return s == "critical" ? 2 : s == "warning" ? 1 : 0; };
        EXPECT_GE(rank(resp.findings(i - 1).severity()), rank(resp.findings(i).severity()));
      }
      EXPECT_THAT(HttpGet(server_->metrics_port(), "/metrics"), HasSubstr("anvil_job_findings_total{code=\""));
    }
  }
  // The optional action: with doctor.on_lr_too_high "halve", the rate is halved when the loss
  // climbs, which is reported as a finding of its own, and the steps after it run at half.
  {
    v1::JobSpec spec = BlobsSpec(3);
    spec.set_name("doctor-halve");
    spec.set_register_model("doctor-halve");
    spec.set_metric_interval(2);
    spec.mutable_optimizer()->set_name("sgd");
    spec.mutable_optimizer()->set_lr(10.0);
    spec.mutable_doctor()->set_on_lr_too_high("halve");
    const std::vector<v1::MetricEvent> events = Stream(Submit(spec).id());
    bool halved = false;
    double lr_after = 0;
    for (const auto& e : events) {
      if (e.has_finding() && e.finding().code() == "DOCTOR_HALVED_LR") halved = true;
      if (halved && e.has_step_metrics() && lr_after == 0) lr_after = e.step_metrics().lr();
    }
    EXPECT_TRUE(halved);
    if (lr_after > 0) {  // a step event after the action (the run may fail first: the rate is still high)
      EXPECT_DOUBLE_EQ(lr_after, 5.0);
    }
    v1::JobSpec bad = BlobsSpec(1);
    bad.mutable_doctor()->set_on_overfitting("panic");
    grpc::Status st;
    Submit(bad, &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("doctor.on_overfitting"));
  }
  grpc::ClientContext ctx;
  v1::GetFindingsRequest req;
  req.set_job_id("job-nope");
  v1::GetFindingsResponse resp;
  EXPECT_EQ(training_->GetFindings(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Mixed precision through the service: an fp16 job trains with loss scaling (the scale in
// every step event, the Prometheus families filled), a bf16 job without; both register
// float32 models that serve; a precision the service does not know is INVALID_ARGUMENT.
TEST_F(ServerTest, MixedPrecisionJobsTrainReportTheirScaleAndServe) {
  for (const std::string precision : {"fp16", "bf16"}) {
    v1::JobSpec spec = BlobsSpec(2);
    spec.set_name("amp-" + precision);
    spec.set_register_model("amp-" + precision);
    spec.set_precision(precision == "bf16" ? "bfloat16" : precision);  // the dtype name is accepted too
    if (precision == "bf16") spec.set_serving_precision("bf16");
    const v1::Job job = Submit(spec);
    ASSERT_FALSE(job.id().empty());
    EXPECT_EQ(job.spec().precision(), precision);  // written back in its short form
    const std::vector<v1::MetricEvent> events = Stream(job.id());
    ASSERT_FALSE(events.empty());
    ASSERT_EQ(events.back().state(), v1::SUCCEEDED) << events.back().message();
    int64_t steps = 0;
    for (const auto& e : events) {
      if (!e.has_step_metrics()) continue;
      ++steps;
      if (precision == "fp16") {
        EXPECT_GT(e.step_metrics().loss_scale(), 0.0);
        EXPECT_LE(e.step_metrics().loss_scale(), 65536.0);
      } else {
        EXPECT_EQ(e.step_metrics().loss_scale(), 0.0);
      }
    }
    EXPECT_GT(steps, 0);
    const Tensor x = randn({3, 2});
    v1::PredictResponse resp;
    ASSERT_TRUE(Predict(PredictOf("amp-" + precision, x), &resp).ok());
    const Tensor served = decode_tensor(resp.outputs(0));
    EXPECT_EQ(served.dtype(), kFloat32);
    // GetModel: the serving precision and the validation accuracy per precision.
    grpc::ClientContext ctx;
    v1::GetModelRequest get;
    get.set_name("amp-" + precision);
    v1::Model model;
    ASSERT_TRUE(serving_->GetModel(&ctx, get, &model).ok());
    EXPECT_EQ(model.precision(), precision == "bf16" ? "bf16" : "fp32");
    ASSERT_TRUE(model.accuracy().count("fp32")) << precision;
    ASSERT_TRUE(model.accuracy().count(precision)) << precision;
    EXPECT_NEAR(model.accuracy().at(precision), model.accuracy().at("fp32"), 0.05);
    // The served outputs against the float32 weights run locally in float32: equal for an fp32
    // model, close (bfloat16's 8 bits) and not equal for a bf16 one.
    grpc::Status st;
    std::string sha;
    int64_t total = 0;
    const std::string native = Export("amp-" + precision, v1::NATIVE, &st, &sha, &total);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const fs::path file = root_ / ("amp-" + precision + ".anvil");
    std::ofstream(file, std::ios::binary) << native;
    models::LoadedModel loaded = models::load_model_archive(file.string());
    EXPECT_EQ(loaded.info.precision, model.precision());
    Tensor local;
    {
      InferenceMode guard;
      local = loaded.built.module->forward(x);
    }
    if (precision == "bf16") {
      EXPECT_TRUE(allclose(served, local, 5e-2, 5e-2));
      EXPECT_FALSE(equal(served, local)) << "served in bf16, yet bitwise the float32 forward";
    } else {
      EXPECT_TRUE(allclose(served, local, 1e-5, 1e-6));
    }
  }
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(text, HasSubstr("# TYPE anvil_amp_loss_scale gauge"));
  EXPECT_THAT(text, HasSubstr("# TYPE anvil_amp_skipped_steps_total counter"));
  EXPECT_THAT(text, HasSubstr("anvil_amp_loss_scale{job="));
  // Series for the fp16 job only: a bf16 job has no loss scale.
  int amp_series = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("anvil_amp_loss_scale{", 0) != 0 && line.rfind("anvil_amp_skipped_steps_total{", 0) != 0) continue;
    ++amp_series;
    EXPECT_THAT(line, HasSubstr("name=\"amp-fp16\"")) << line;
  }
  EXPECT_EQ(amp_series, 2);
  grpc::Status st;
  v1::JobSpec bad = BlobsSpec();
  bad.set_precision("int8");
  Submit(bad, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("precision"));
  EXPECT_THAT(st.error_message(), HasSubstr("\"bf16\""));
  EXPECT_THAT(st.error_message(), HasSubstr("int8"));
  v1::JobSpec anomaly = BlobsSpec();
  anomaly.set_amp_anomaly(true);  // with fp32 there is nothing to check
  Submit(anomaly, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("amp_anomaly"));
}

// The batcher's limits as a client sees them: a full queue answers UNAVAILABLE at once, and
// a request whose deadline passes while it waits for its batch is answered
// DEADLINE_EXCEEDED by the server without running (the server's own metrics say so; the
// client's timer alone would also report DEADLINE_EXCEEDED).
TEST_F(ServerTest, PredictRefusesWhenTheQueueIsFullAndHonoursDeadlinesWhileQueued) {
  Stop();
  ServerOptions o;
  o.batching.max_batch = 64;
  o.batching.max_delay = std::chrono::milliseconds(500);  // a lone request waits this long for company
  o.batching.max_queue = 1;
  Start(o);
  Stream(Submit(BlobsSpec(1)).id());
  const int port = server_->metrics_port();
  auto scrape_until = [&](const std::string& needle) {
    return WaitUntil([&] { return HttpGet(port, "/metrics").find(needle) != std::string::npos; });
  };
  grpc::Status first_status;
  std::thread first([&] {
    v1::PredictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    first_status = serving_->Predict(&ctx, PredictOf("blobs-mlp", randn({2, 2})), &resp);
  });
  ASSERT_TRUE(scrape_until("anvil_predict_queue_depth{model=\"blobs-mlp\"} 1\n")) << "the first request never queued";
  v1::PredictResponse resp;
  grpc::Status full = Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp);
  EXPECT_EQ(full.error_code(), StatusCode::UNAVAILABLE);
  EXPECT_THAT(full.error_message(), HasSubstr("queue is full (1 requests)"));
  first.join();
  EXPECT_TRUE(first_status.ok()) << first_status.error_message();
  EXPECT_TRUE(scrape_until("anvil_predict_queue_depth{model=\"blobs-mlp\"} 0\n"));
  EXPECT_TRUE(scrape_until("anvil_predict_batch_rows_count{model=\"blobs-mlp\"} 1\n"));

  // 100 ms to live, 500 ms of batching delay ahead: the server drops it before the forward.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  EXPECT_EQ(serving_->Predict(&ctx, PredictOf("blobs-mlp", randn({1, 2})), &resp).error_code(),
            StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(scrape_until("anvil_predict_requests_total{code=\"DEADLINE_EXCEEDED\",model=\"blobs-mlp\"} 1\n"))
      << "the server did not answer the expired request itself";
  const std::string text = HttpGet(port, "/metrics");
  EXPECT_THAT(text, HasSubstr("anvil_predict_batch_rows_count{model=\"blobs-mlp\"} 1\n"));  // no forward ran
  EXPECT_THAT(text, HasSubstr("anvil_predict_requests_total{code=\"UNAVAILABLE\",model=\"blobs-mlp\"} 1\n"));
  // And the model still serves.
  EXPECT_TRUE(Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp).ok());
}

// A drain ends open streams with UNAVAILABLE (reconnect later) and interrupts the job, which
// the next start resumes.
TEST_F(ServerTest, DrainEndsStreamsWithUnavailableAndInterruptsTheJob) {
  v1::JobSpec spec = BlobsSpec(400);
  spec.set_metric_interval(1);
  const v1::Job job = Submit(spec);
  grpc::ClientContext ctx;
  v1::StreamMetricsRequest req;
  req.set_job_id(job.id());
  auto reader = training_->StreamMetrics(&ctx, req);
  v1::MetricEvent e;
  int steps = 0;
  while (steps < 5 && reader->Read(&e)) steps += e.has_step_metrics();
  std::thread stopper([&] { server_->shutdown(std::chrono::seconds(5)); });
  while (reader->Read(&e)) {
  }
  const grpc::Status st = reader->Finish();
  stopper.join();
  EXPECT_EQ(st.error_code(), StatusCode::UNAVAILABLE) << st.error_message();
  server_.reset();
  Start();
  const v1::Job after = Get(job.id());
  EXPECT_TRUE(after.state() == v1::QUEUED || after.state() == v1::RUNNING) << v1::JobState_Name(after.state());
  grpc::ClientContext cancel_ctx;
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  v1::Job resp;
  EXPECT_TRUE(training_->CancelJob(&cancel_ctx, cancel, &resp).ok());
}

// Several readers of one job at once each get the whole stream, identical.
TEST_F(ServerTest, ManySubscribersSeeTheSameStream) {
  v1::JobSpec spec = BlobsSpec(5);
  spec.set_metric_interval(1);
  const v1::Job job = Submit(spec);
  std::vector<std::vector<v1::MetricEvent>> seen(4);
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) readers.emplace_back([&, r] { seen[r] = Stream(job.id()); });
  for (auto& t : readers) t.join();
  ASSERT_GT(seen[0].size(), 100u);
  for (int r = 1; r < 4; ++r) {
    ASSERT_EQ(seen[r].size(), seen[0].size());
    for (size_t i = 0; i < seen[0].size(); ++i)
      EXPECT_EQ(seen[r][i].SerializeAsString(), seen[0][i].SerializeAsString());
  }
}

// While the worker is busy, queued jobs start by priority, then in submission order.
TEST_F(ServerTest, QueuedJobsStartByPriorityThenFifo) {
  v1::JobSpec blocker = BlobsSpec(40);
  blocker.set_name("blocker");
  const v1::Job first = Submit(blocker);
  ASSERT_TRUE(WaitUntil([&] { return Get(first.id()).state() == v1::RUNNING; }));
  std::vector<std::string> ids;
  for (const auto& [name, priority] :
       std::vector<std::pair<std::string, int>>{{"low-a", 0}, {"high", 5}, {"low-b", 0}}) {
    v1::JobSpec s = BlobsSpec(1);
    s.set_name(name);
    s.set_priority(priority);
    ids.push_back(Submit(s).id());
  }
  EXPECT_EQ(Get(ids[0]).state(), v1::QUEUED);
  for (const std::string& id : ids) Stream(id);
  const int64_t low_a = Get(ids[0]).started_unix_ms(), high = Get(ids[1]).started_unix_ms(),
                low_b = Get(ids[2]).started_unix_ms();
  EXPECT_LE(high, low_a);
  EXPECT_LE(low_a, low_b);
  EXPECT_GE(high, Get(first.id()).finished_unix_ms());
}

// A second job under the same model name registers version 2; "latest" follows it and
// version 1 stays servable.
TEST_F(ServerTest, VersionsAccumulateAndLatestFollows) {
  Stream(Submit(BlobsSpec(1)).id());
  v1::PredictResponse resp;
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp).ok());
  EXPECT_EQ(resp.version(), 1);
  v1::JobSpec again = BlobsSpec(1);
  again.set_seed(8);
  Stream(Submit(again).id());
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp).ok());
  EXPECT_EQ(resp.version(), 2);
  v1::PredictRequest v1_req = PredictOf("blobs-mlp", randn({1, 2}));
  v1_req.set_version("1");
  ASSERT_TRUE(Predict(v1_req, &resp).ok());
  EXPECT_EQ(resp.version(), 1);
}

// Beyond max_loaded_models the least recently used version is unloaded, and reloaded from
// its archive when it is asked for again.
// Worker devices come from --devices: a device this machine lacks is a clear start-up error
// (never a server without workers), a device listed twice is refused, and "cpu" alone works.
TEST_F(ServerTest, WorkerDevicesAreCheckedAtStartUp) {
  Stop();
  auto start_error = [&](const std::string& devices, const std::string& serving) {
    ServerOptions o;
    o.devices = devices;
    o.serving_device = serving;
    try {
      Start(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    Stop();
    return std::string();
  };
  if (!cuda_is_available()) {
    EXPECT_THAT(start_error("cuda:0,cpu", "cpu"), HasSubstr("cuda:0 is not available"));
    EXPECT_THAT(start_error("cpu", "cuda:0"), HasSubstr("cuda:0 is not available"));
  }
  EXPECT_THAT(start_error("cpu,cpu", "cpu"), HasSubstr("cpu is listed twice"));
  EXPECT_THAT(start_error("gpu", "cpu"), HasSubstr("gpu"));
  EXPECT_EQ(start_error("cpu", "cpu"), "");
  Start();  // the fixture's server for TearDown
  grpc::ClientContext ctx;
  v1::ListModelsRequest req;
  v1::ListModelsResponse resp;
  EXPECT_TRUE(serving_->ListModels(&ctx, req, &resp).ok());
}

// One anvild per data directory: a second server on the fixture's folder is refused, naming
// the first one's pid; once the first stops, a start removes the unfinished temporary files
// (AtomicFile's NAME.tmp.XXXXXX) an earlier stop left, and nothing else.
TEST_F(ServerTest, ASecondServerOnTheSameDataDirIsRefusedAndTemporariesAreSwept) {
  ServerOptions o;
  o.address = "127.0.0.1:0";
  o.metrics_address = "";
  o.data_dir = (root_ / "data").string();
  {
    AnvilServer second(o);
    try {
      second.start();
      FAIL() << "a second server started on a data directory in use";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("is in use by another anvild (pid " + std::to_string(::getpid()) + ")"));
      EXPECT_THAT(e.what(), HasSubstr("anvild.lock"));
      EXPECT_THAT(e.what(), HasSubstr("--data-dir"));
    }
  }
  // The refused start did not disturb the running server.
  {
    grpc::ClientContext ctx;
    v1::ListModelsResponse resp;
    EXPECT_TRUE(serving_->ListModels(&ctx, v1::ListModelsRequest(), &resp).ok());
  }
  Stop();
  const fs::path data = root_ / "data";
  fs::create_directories(data / "jobs" / "job-0123456789ab");
  auto write = [](const fs::path& p) { std::ofstream(p) << "partial"; };
  const fs::path unfinished = data / "jobs" / "job-0123456789ab" / "checkpoint.anvil.tmp.Ab12Cd";
  const fs::path top_unfinished = data / "tokens.json.tmp.zzzzzz";
  const std::vector<fs::path> kept = {data / "notes.tmp", data / "jobs" / "job-0123456789ab" / "a.tmp.toolong1",
                                      data / "jobs" / "job-0123456789ab" / "checkpoint.anvil"};
  write(unfinished);
  write(top_unfinished);
  for (const fs::path& p : kept) write(p);
  Start();
  EXPECT_FALSE(fs::exists(unfinished));
  EXPECT_FALSE(fs::exists(top_unfinished));
  for (const fs::path& p : kept) EXPECT_TRUE(fs::exists(p)) << p;
  std::ifstream lock(data / "anvild.lock");
  int64_t pid = 0;
  lock >> pid;
  EXPECT_EQ(pid, ::getpid());
}

TEST_F(ServerTest, LeastRecentlyUsedModelsAreUnloadedAndReloaded) {
  Stop();
  ServerOptions o;
  o.max_loaded_models = 1;
  Start(o);
  Stream(Submit(BlobsSpec(1)).id());
  v1::JobSpec other = BlobsSpec(1);
  other.set_register_model("other");
  Stream(Submit(other).id());
  const Tensor x = randn({2, 2});
  v1::PredictResponse first, again, b;
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", x), &first).ok());  // loads blobs-mlp, unloads other
  ASSERT_TRUE(Predict(PredictOf("other", x), &b).ok());          // and back
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", x), &again).ok());
  EXPECT_EQ(first.outputs(0).raw(), again.outputs(0).raw());  // the reloaded model is the same
  EXPECT_THAT(HttpGet(server_->metrics_port(), "/metrics"), HasSubstr("anvil_models_loaded 1\n"));
  // Two registrations and three loads for the predicts above.
  const auto loads = [&] {
    const std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
    const size_t at = metrics.find("\nanvil_model_loads_total ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + 25));
  };
  EXPECT_EQ(loads(), 5);
  // A listing describes both versions without making "other" resident (which would unload
  // blobs-mlp, being served), and the next listing reads no archive at all.
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::ListModelsResponse listed;
    ASSERT_TRUE(serving_->ListModels(&ctx, v1::ListModelsRequest(), &listed).ok());
    ASSERT_EQ(listed.models_size(), 2);
    for (const v1::Model& m : listed.models()) {
      EXPECT_EQ(m.inputs(0).shape_size(), 2) << m.name();
      EXPECT_GT(m.parameters(), 0) << m.name();
    }
  }
  EXPECT_EQ(loads(), 5);
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", x), &again).ok());
  EXPECT_EQ(loads(), 5);  // still resident
  EXPECT_EQ(first.outputs(0).raw(), again.outputs(0).raw());
}

// The byte budget: two archives do not fit, so loading one unloads the other, whichever count
// max_loaded_models allows; the gauge reports the resident archives' bytes (their file sizes).
TEST_F(ServerTest, TheLoadedModelsByteBudgetUnloadsTheLeastRecentlyUsed) {
  Stop();
  ServerOptions o;
  o.max_loaded_models = 32;
  Start(o);
  Stream(Submit(BlobsSpec(1)).id());
  Stop();
  int64_t archive_bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(root_ / "data" / "jobs")) {
    if (e.path().filename() == "model.anvil") archive_bytes = static_cast<int64_t>(fs::file_size(e.path()));
  }
  ASSERT_GT(archive_bytes, 0);
  o.max_model_memory = archive_bytes + archive_bytes / 2;  // room for one
  Start(o);
  v1::JobSpec other = BlobsSpec(1);
  other.set_register_model("other");
  Stream(Submit(other).id());
  const Tensor x = randn({2, 2});
  v1::PredictResponse first, again, b;
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", x), &first).ok());
  std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("anvil_models_loaded 1\n"));
  EXPECT_THAT(metrics, HasSubstr("anvil_models_loaded_bytes " + std::to_string(archive_bytes) + "\n"));
  ASSERT_TRUE(Predict(PredictOf("other", x), &b).ok());
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", x), &again).ok());
  EXPECT_EQ(first.outputs(0).raw(), again.outputs(0).raw());
  EXPECT_THAT(HttpGet(server_->metrics_port(), "/metrics"), HasSubstr("anvil_models_loaded 1\n"));
}

// An archive changed on disk after registration is never served as if it were intact.
TEST_F(ServerTest, ACorruptedArchiveIsDataLoss) {
  Stream(Submit(BlobsSpec(1)).id());
  fs::path archive;
  for (const auto& e : fs::recursive_directory_iterator(root_ / "data" / "jobs")) {
    if (e.path().filename() == "model.anvil") archive = e.path();
  }
  ASSERT_FALSE(archive.empty());
  {
    std::fstream f(archive, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x01\x02\x03\x04", 4);
  }
  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  Export("blobs-mlp", v1::NATIVE, &st, &sha, &total);
  EXPECT_EQ(st.error_code(), StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("SHA-256"));
  EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr(root_.string())));
  // After a restart the model loads from that file: Predict answers DATA_LOSS too, saying so
  // once ("its archive KEY is corrupt (SHA-256 ...)", not the store's words wrapped in the same).
  Stop();
  Start();
  v1::PredictResponse resp;
  const grpc::Status loaded = Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp);
  EXPECT_EQ(loaded.error_code(), StatusCode::DATA_LOSS);
  const std::string message = loaded.error_message();
  EXPECT_THAT(message, ::testing::ContainsRegex("its archive [^ ]+ is corrupt \\(SHA-256"));
  EXPECT_EQ(message.find("is corrupt"), message.rfind("is corrupt")) << message;
}

// Drain mid-job, restart on the same data dir: the job resumes from its checkpoint, its
// stream holds every step once, and its final weights equal an uninterrupted run's.
TEST_F(ServerTest, RestartResumesFromTheCheckpointToTheSameWeights) {
  v1::JobSpec spec = BlobsSpec(30);
  spec.set_metric_interval(1);
  spec.mutable_checkpoint()->set_every_steps(7);
  spec.set_register_model("interrupted");
  const v1::Job job = Submit(spec);
  // Wait until it is well into training, then stop the server.
  ASSERT_TRUE(WaitUntil([&] { return Get(job.id()).step() >= 60; }));
  Stop();
  Start();
  const std::vector<v1::MetricEvent> events = Stream(job.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), v1::SUCCEEDED) << events.back().message();
  std::set<int64_t> seen;
  int64_t last = 0;
  bool interrupted = false;
  int64_t resumed_at = -1;
  for (const auto& e : events) {
    interrupted = interrupted || (e.event_case() == v1::MetricEvent::kState && e.state() == v1::INTERRUPTED);
    const std::string kResume = "resuming from the checkpoint at step ";
    if (e.event_case() == v1::MetricEvent::kState && e.message().rfind(kResume, 0) == 0) {
      resumed_at = std::stoll(e.message().substr(kResume.size()));
    }
    if (!e.has_step_metrics()) continue;
    EXPECT_TRUE(seen.insert(e.step()).second) << "step " << e.step() << " twice";
    EXPECT_EQ(e.step(), last + 1) << "gap before step " << e.step();
    last = e.step();
  }
  EXPECT_TRUE(interrupted);
  EXPECT_GE(resumed_at, 60);  // from the checkpoint written at the stop, not from scratch
  EXPECT_EQ(last, Get(job.id()).step());

  // The same spec, uninterrupted.
  spec.set_register_model("straight");
  Stream(Submit(spec).id());
  grpc::Status st;
  std::string sha_a, sha_b;
  int64_t total = 0;
  const std::string a = Export("interrupted", v1::SAFETENSORS, &st, &sha_a, &total);
  ASSERT_TRUE(st.ok());
  const std::string b = Export("straight", v1::SAFETENSORS, &st, &sha_b, &total);
  ASSERT_TRUE(st.ok());
  const io::Safetensors wa = io::parse_safetensors(a, "a"), wb = io::parse_safetensors(b, "b");
  ASSERT_EQ(wa.tensors.size(), wb.tensors.size());
  for (size_t i = 0; i < wa.tensors.size(); ++i) {
    EXPECT_TRUE(equal(wa.tensors[i].second, wb.tensors[i].second)) << wa.tensors[i].first;
  }
}

}  // namespace
}  // namespace anvil::server
