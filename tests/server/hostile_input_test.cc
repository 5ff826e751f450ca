// Hostile and unlucky inputs, round two: text that is not UTF-8 (files in the data root and
// request fields), malformed and oversized messages on every RPC, registrations that fail
// half-way, and stored fields that would make every listing fail. Each case asserts the
// documented status and that the listings and the status page keep working for everyone.
#include <google/protobuf/descriptor.h>

#include <future>
#include <nlohmann/json.hpp>

#include "core/data/datasets/image_folder.h"
#include "onnx/onnx_pb.h"
#include "proto/inference/grpc_service.grpc.pb.h"
#include "server/metrics/http.h"
#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

using grpc::StatusCode;
using ::testing::HasSubstr;
using ::testing::Not;

class HostileInputTest : public ServerFixture {
 protected:
  // What every user sees after the case: the listing, the job itself and the status page.
  void ExpectListingsWork(const std::string& job_id) {
    grpc::ClientContext ctx;
    v1::ListJobsResponse jobs;
    const grpc::Status listed = training_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs);
    EXPECT_TRUE(listed.ok()) << listed.error_code() << " " << listed.error_message();
    grpc::ClientContext ctx2;
    v1::GetJobRequest get;
    get.set_job_id(job_id);
    v1::Job job;
    const grpc::Status got = training_->GetJob(&ctx2, get, &job);
    EXPECT_TRUE(got.ok()) << got.error_code() << " " << got.error_message();
    std::string status_line;
    const std::string page = HttpGet(server_->metrics_port(), "/status.json", &status_line);
    EXPECT_THAT(status_line, HasSubstr("200"));
    EXPECT_TRUE(nlohmann::json::accept(page)) << page.substr(0, 200);
  }

  // Submits `spec`; when it is accepted, waits for the job to end. The refusal or the failure
  // reason, whichever the service chose.
  std::string RefusalOrFailure(const v1::JobSpec& spec, std::string* job_id) {
    grpc::Status st;
    const v1::Job job = Submit(spec, &st);
    if (!st.ok()) {
      EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
      return st.error_message();
    }
    *job_id = job.id();
    Stream(job.id());
    const v1::Job done = Get(job.id());
    EXPECT_EQ(done.state(), v1::FAILED);
    return done.reason();
  }
};

// A CSV in Latin-1 ("café" as 63 61 66 E9) with a label column it does not have: the error
// quotes the header. Before, the stored reason broke ListJobs, GetJob and /status.json.
TEST_F(HostileInputTest, ALatin1CsvIsRefusedNamingTheLineAndTheListingsKeepWorking) {
  std::ofstream(root_ / "data" / "latin1.csv", std::ios::binary) << "caf\xE9,x,label\n1,2,0\n3,4,1\n";
  v1::JobSpec spec = BlobsSpec(1);
  spec.set_name("latin1");
  spec.mutable_dataset()->clear_name();
  spec.mutable_dataset()->set_path("latin1.csv");
  spec.mutable_dataset()->set_label_column("no-such-column");
  std::string id;
  const std::string why = RefusalOrFailure(spec, &id);
  EXPECT_THAT(why, HasSubstr("latin1.csv:1"));
  EXPECT_THAT(why, HasSubstr("not valid UTF-8 at byte 3 (0xE9)"));
  EXPECT_THAT(why, Not(HasSubstr("type_error")));
  if (!id.empty()) ExpectListingsWork(id);
  // A value further down is found too, with its line.
  std::ofstream(root_ / "data" / "latin1b.csv", std::ios::binary) << "a,b,label\n1,2,0\n3,\xE9t\xE9,1\n";
  spec.set_name("latin1b");
  spec.mutable_dataset()->set_path("latin1b.csv");
  spec.mutable_dataset()->clear_label_column();
  std::string id2;
  EXPECT_THAT(RefusalOrFailure(spec, &id2), HasSubstr("latin1b.csv:3"));
  if (!id2.empty()) ExpectListingsWork(id2);
}

// Class folder names in Latin-1: before, the job failed with "INTERNAL: json type_error.316"
// when its labels were stored with the model.
TEST_F(HostileInputTest, Latin1ClassFolderNamesAreRefusedNamingTheFolder) {
  const fs::path data = root_ / "data" / "pets";
  const Tensor pixels = zeros({8, 8, 3}, kUInt8);
  for (const char* cls : {"chat", "f\xE9lin"}) {
    fs::create_directories(data / cls);
    for (int i = 0; i < 4; ++i) data::write_png((data / cls / (std::to_string(i) + ".png")).string(), pixels);
  }
  v1::JobSpec spec;
  spec.set_name("pets");
  spec.set_model_preset("mlp");
  spec.mutable_dataset()->set_path("pets");
  spec.set_epochs(1);
  std::string id;
  const std::string why = RefusalOrFailure(spec, &id);
  EXPECT_THAT(why, HasSubstr("class folder"));
  EXPECT_THAT(why, HasSubstr("f\xEF\xBF\xBDlin"));  // quoted with U+FFFD in place of the byte
  EXPECT_THAT(why, HasSubstr("not valid UTF-8 at byte 1 (0xE9)"));
  EXPECT_THAT(why, Not(HasSubstr("type_error")));
  if (!id.empty()) ExpectListingsWork(id);
}

// Data whose labels hold one class: a classifier would "learn" to answer it always, at 100 %
// validation accuracy. Refused at the dry run and failed at the job's start, naming the class.
TEST_F(HostileInputTest, DataOfOneClassIsRefusedNamingTheClass) {
  std::ofstream(root_ / "data" / "cats.csv") << "a,b,label\n1,2,cat\n3,4,cat\n5,6,cat\n";
  std::ofstream(root_ / "data" / "threes.csv") << "a,b,y\n1,2,3\n3,4,3\n5,6,3\n";
  const fs::path folder = root_ / "data" / "only";
  fs::create_directories(folder / "dog");
  for (int i = 0; i < 4; ++i)
    data::write_png((folder / "dog" / (std::to_string(i) + ".png")).string(), zeros({8, 8, 3}, kUInt8));
  struct Case {
    const char* path;
    const char* label_column;
    const char* named;
  };
  for (const Case& c :
       {Case{"cats.csv", "label", "\"cat\""}, Case{"threes.csv", "y", "\"3\""},
        Case{"only", "",
             "\"dog\": a classifier needs at least 2 classes to learn anything (each class is a subfolder"}}) {
    SCOPED_TRACE(c.path);
    v1::JobSpec spec;
    spec.set_name("one-class");
    spec.set_model_preset("mlp");
    spec.mutable_dataset()->set_path(c.path);
    spec.mutable_dataset()->set_label_column(c.label_column);
    spec.set_epochs(1);
    v1::SubmitJobRequest dry;
    *dry.mutable_spec() = spec;
    dry.set_dry_run(true);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status st = training_->SubmitJob(&ctx, dry, &resp);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(std::string("every sample is labelled ") + c.named));
    EXPECT_THAT(st.error_message(), HasSubstr("a classifier needs at least 2 classes"));
    std::string id;
    EXPECT_THAT(RefusalOrFailure(spec, &id), HasSubstr("a classifier needs at least 2 classes"));
  }
  // Two classes are enough.
  std::ofstream(root_ / "data" / "pets.csv") << "a,b,label\n1,2,cat\n3,4,dog\n5,6,cat\n7,8,dog\n";
  v1::JobSpec spec;
  spec.set_name("two-classes");
  spec.set_model_preset("mlp");
  spec.mutable_dataset()->set_path("pets.csv");
  spec.mutable_dataset()->set_label_column("label");
  spec.set_epochs(1);
  const v1::Job job = Submit(spec);
  Stream(job.id());
  EXPECT_EQ(Get(job.id()).state(), v1::SUCCEEDED) << Get(job.id()).reason();
}

// --- Atomic registration -------------------------------------------------------------------

class RegistrationTest : public HostileInputTest {
 protected:
  // The blobs MLP, trained for one epoch and exported as ONNX, parsed: the base of each case.
  ::onnx::ModelProto TrainedOnnx() {
    Stream(Submit(BlobsSpec(1)).id());
    grpc::Status st;
    std::string sha;
    int64_t total = 0;
    const std::string file = Export("blobs-mlp", v1::ONNX, &st, &sha, &total);
    EXPECT_TRUE(st.ok()) << st.error_message();
    ::onnx::ModelProto m;
    EXPECT_TRUE(m.ParseFromString(file));
    return m;
  }

  // A Constant node, its output read by nothing, holding `value`.
  static void AddConstant(::onnx::ModelProto& m, const ::onnx::TensorProto& value) {
    ::onnx::NodeProto* n = m.mutable_graph()->add_node();
    n->set_name("extra");
    n->set_op_type("Constant");
    n->add_output("extra_out");
    ::onnx::AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    *a->mutable_t() = value;
  }

  int ModelCount() {
    grpc::ClientContext ctx;
    v1::ListModelsResponse models;
    EXPECT_TRUE(serving_->ListModels(&ctx, v1::ListModelsRequest(), &models).ok());
    return models.models_size();
  }

  // Registers `m` as "outside": refused with INVALID_ARGUMENT naming `expected`, nothing kept.
  void ExpectRefused(const ::onnx::ModelProto& m, const std::string& expected) {
    const int before = ModelCount();
    fs::create_directories(root_ / "data" / "imports");
    const auto files = std::distance(fs::directory_iterator(root_ / "data" / "imports"), fs::directory_iterator{});
    v1::Model model;
    const grpc::Status st = RegisterModel("outside", m.SerializeAsString(), &model);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(expected));
    EXPECT_THAT(st.error_message(), HasSubstr("nothing was registered"));
    EXPECT_EQ(ModelCount(), before);
    EXPECT_EQ(std::distance(fs::directory_iterator(root_ / "data" / "imports"), fs::directory_iterator{}), files);
  }
};

// The probe's case: a producer name that is not UTF-8 answered INTERNAL and kept the row, so
// after a restart "latest" of a served model answered DATA_LOSS.
TEST_F(RegistrationTest, AFileThatCannotBeServedLeavesNoVersionBehindAcrossARestart) {
  const ::onnx::ModelProto good = TrainedOnnx();
  v1::Model model;
  ASSERT_TRUE(RegisterModel("outside", good.SerializeAsString(), &model).ok());
  ASSERT_EQ(model.version(), 1);
  ::onnx::ModelProto bad = good;
  bad.set_producer_name("caf\xE9");
  ExpectRefused(bad, "producer_name: not valid UTF-8 at byte 3 (0xE9)");
  Stop();
  Start();
  grpc::ClientContext ctx;
  v1::GetModelRequest get;
  get.set_name("outside");
  get.set_version("latest");
  const grpc::Status st = serving_->GetModel(&ctx, get, &model);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(model.version(), 1);
  v1::PredictResponse resp;
  EXPECT_TRUE(Predict(PredictOf("outside", randn({2, 2})), &resp).ok());
  // The next good registration is version 2: no number was used up by the refused one.
  ASSERT_TRUE(RegisterModel("outside", good.SerializeAsString(), &model).ok());
  EXPECT_EQ(model.version(), 2);
}

// Three cases that registered and failed only at the first Predict: the whole graph is
// checked when the file comes.
TEST_F(RegistrationTest, TheWholeGraphIsCheckedAtRegistration) {
  const ::onnx::ModelProto good = TrainedOnnx();
  {  // a Constant whose shape disagrees with its data
    ::onnx::ModelProto m = good;
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::FLOAT);
    t.add_dims(2);
    t.add_dims(2);
    for (float v : {1.f, 2.f, 3.f}) t.add_float_data(v);
    AddConstant(m, t);
    ExpectRefused(m, "3 values for shape [2, 2] (4 expected)");
  }
  {  // a Constant whose data is in an external file
    ::onnx::ModelProto m = good;
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::FLOAT);
    t.add_dims(1);
    t.set_data_location(::onnx::TensorProto::EXTERNAL);
    ::onnx::StringStringEntryProto* e = t.add_external_data();
    e->set_key("location");
    e->set_value("/etc/passwd");
    AddConstant(m, t);
    ExpectRefused(m, "external data is refused");
  }
  {  // a dim of -1 in the input's signature
    ::onnx::ModelProto m = good;
    m.mutable_graph()
        ->mutable_input(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(1)
        ->set_dim_value(-1);
    ExpectRefused(m, "dim 1 is -1");
  }
  {  // a node that fails on any input: found by the trial run on a batch of one
    ::onnx::ModelProto m = good;
    ::onnx::NodeProto* n = m.mutable_graph()->add_node();
    n->set_name("wrong");
    n->set_op_type("MatMul");
    n->add_input(m.graph().input(0).name());
    n->add_input(m.graph().input(0).name());  // [1, 2] @ [1, 2]
    n->add_output("wrong_out");
    ExpectRefused(m, "the model does not run on a batch of one [1, 2]");
  }
}

// --- Rules over every RPC ------------------------------------------------------------------

// Every method of the services anvild serves, from the descriptors the server was built from.
std::vector<const google::protobuf::MethodDescriptor*> EveryMethod() {
  std::vector<const google::protobuf::MethodDescriptor*> out;
  for (const char* name : {"anvil.v1.Training", "anvil.v1.Serving", "inference.GRPCInferenceService"}) {
    const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    EXPECT_NE(service, nullptr) << name;
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) out.push_back(service->method(i));
  }
  return out;
}

std::string PathOf(const google::protobuf::MethodDescriptor* m) {
  return "/" + m->service()->full_name() + "/" + m->name();
}

// Each string field reachable from `type` (three messages deep, one entry of each repeated
// field): its path as the server names it ("spec.dataset.path", "inputs[0].name") and a
// message of `type` with "café" in Latin-1 in that field alone.
struct StringCase {
  std::string path;
  std::string bytes;
};

void CollectStringFields(const google::protobuf::Descriptor* type,
                         std::vector<const google::protobuf::FieldDescriptor*>& trail,
                         std::vector<std::vector<const google::protobuf::FieldDescriptor*>>& out) {
  if (trail.size() >= 3) return;
  for (int i = 0; i < type->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = type->field(i);
    trail.push_back(f);
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING) out.push_back(trail);
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE)
      CollectStringFields(f->message_type(), trail, out);
    trail.pop_back();
  }
}

// The wire bytes of a message with only the last field of `fields` set ("café" in Latin-1),
// each field before it the message that holds the next: built by hand, since protobuf's own
// serializer and reflection are not meant to hold a string that is not UTF-8.
std::string NestedBytes(const std::vector<const google::protobuf::FieldDescriptor*>& fields, size_t i) {
  const std::string payload = i + 1 == fields.size() ? std::string("caf\xE9") : NestedBytes(fields, i + 1);
  std::string out;
  auto varint = [&out](uint64_t v) {
    for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    out.push_back(static_cast<char>(v));
  };
  varint(static_cast<uint64_t>(fields[i]->number()) << 3 | 2);
  varint(payload.size());
  return out + payload;
}

std::vector<StringCase> StringCases(const google::protobuf::Descriptor* type) {
  std::vector<std::vector<const google::protobuf::FieldDescriptor*>> trails;
  std::vector<const google::protobuf::FieldDescriptor*> trail;
  CollectStringFields(type, trail, trails);
  std::vector<StringCase> out;
  for (const auto& fields : trails) {
    std::string path;
    for (const google::protobuf::FieldDescriptor* f : fields) {
      path += (path.empty() ? "" : ".") + f->name() + (f->is_repeated() ? "[0]" : "");
    }
    out.push_back({path, NestedBytes(fields, 0)});
  }
  return out;
}

// Malformed wire data is INVALID_ARGUMENT on every method, never INTERNAL (which the API keeps
// for bugs): a truncated length, a bad wire type, a tag of field 0, a truncated varint.
TEST_F(HostileInputTest, MalformedWireDataIsInvalidArgumentOnEveryRpc) {
  const std::vector<std::string> malformed = {std::string("\x0a\xff\xff", 3), std::string("\x0f\x01", 2),
                                              std::string("\x00\x01", 2), std::string("\x08\xff", 2)};
  int methods = 0;
  for (const auto* m : EveryMethod()) {
    ++methods;
    for (const std::string& bytes : malformed) {
      const grpc::Status st = RawCall(PathOf(m), bytes);
      EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT)
          << PathOf(m) << " (" << st.error_code() << "): " << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr("malformed wire data")) << PathOf(m);
    }
  }
  EXPECT_EQ(methods, 21);  // Serving.Quantize and Training.GetFindings are the newest
  // gRPC's own health service answers the same.
  for (const char* method : {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}) {
    for (const std::string& bytes : malformed) {
      const grpc::Status st = RawCall(method, bytes);
      EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << method << ": " << st.error_message();
    }
  }
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(training_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
}

// Each service's message limit holds for each of its RPCs, before parsing: a message over it
// (an unknown field of padding) is RESOURCE_EXHAUSTED naming the limit.
TEST_F(HostileInputTest, EachServicesLimitHoldsOnEachOfItsRpcs) {
  // The fixture's limits: Training 2 MiB, Serving 1 MiB.
  for (const auto* m : EveryMethod()) {
    const bool training = m->service()->name() == "Training";
    const size_t limit = training ? (2 << 20) : (1 << 20);
    std::string bytes;
    const std::string padding(limit + 16, 'x');
    auto varint = [&bytes](uint64_t v) {
      for (; v >= 0x80; v >>= 7) bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
      bytes.push_back(static_cast<char>(v));
    };
    varint(1000 << 3 | 2);  // field 1000, length-delimited: unknown to every request
    varint(padding.size());
    bytes += padding;
    const grpc::Status st = RawCall(PathOf(m), bytes);
    EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED)
        << PathOf(m) << " (" << st.error_code() << "): " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(training ? "--max-training-message-mb" : "--max-predict-message-mb"))
        << PathOf(m);
  }
}

// A string field that is not UTF-8, in every string field of every request, is refused with
// INVALID_ARGUMENT naming the field and the byte.
TEST_F(HostileInputTest, TextThatIsNotUtf8IsRefusedNamingTheFieldOnEveryRpc) {
  int cases = 0;
  for (const auto* m : EveryMethod()) {
    for (const StringCase& c : StringCases(m->input_type())) {
      ++cases;
      const grpc::Status st = RawCall(PathOf(m), c.bytes);
      EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT)
          << PathOf(m) << " " << c.path << " (" << st.error_code() << "): " << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr(c.path + ": not valid UTF-8 at byte 3 (0xE9)")) << PathOf(m);
    }
  }
  EXPECT_GT(cases, 40);
  // Nothing was stored: the listings still work for everyone.
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(training_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

// --- ModelInfer behind Predict's protections ------------------------------------------------

class KServeLimitsTest : public HostileInputTest {
 protected:
  inference::ModelInferRequest InferOf(const std::string& model, const Tensor& x) {
    inference::ModelInferRequest req;
    req.set_model_name(model);
    auto* in = req.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    for (int64_t d : x.sizes()) in->add_shape(d);
    req.add_raw_input_contents(std::string(static_cast<const char*>(x.data_ptr()), x.numel() * sizeof(float)));
    return req;
  }
  grpc::Status Infer(const inference::ModelInferRequest& req, inference::ModelInferResponse* resp) {
    auto stub = inference::GRPCInferenceService::NewStub(channel_);
    grpc::ClientContext ctx;
    return stub->ModelInfer(&ctx, req, resp);
  }
};

// The probe's case: 8 MiB of empty `inputs` entries took the server to 876 MiB. Entries are
// counted on the wire now, before anything is parsed.
TEST_F(KServeLimitsTest, ManyEmptyInputsAreRefusedBeforeParsing) {
  std::string bytes;
  bytes.push_back(0x0a);  // model_name
  bytes.push_back(1);
  bytes.push_back('m');
  const int inputs = inference::ModelInferRequest::kInputsFieldNumber;
  for (int i = 0; i < 200000; ++i) bytes += std::string{static_cast<char>(inputs << 3 | 2), 0};  // one empty input
  const grpc::Status st = RawCall("/inference.GRPCInferenceService/ModelInfer", bytes);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("inputs[64]: expected at most 64 entries"));
}

// ModelInfers wait in Predict's queue on Predict's pool: beyond both, RESOURCE_EXHAUSTED; the
// ones admitted are answered.
TEST_F(KServeLimitsTest, AModelInferFloodSharesPredictsPoolAndQueue) {
  Stop();
  ServerOptions o;
  o.batching.max_batch = 64;
  o.batching.max_delay = std::chrono::milliseconds(400);
  o.limits.max_concurrent_predicts = 2;
  o.limits.max_predict_queue = 2;
  Start(o);
  Stream(Submit(BlobsSpec(1)).id());
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < 12; ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      if (i % 2 == 0) {
        v1::PredictResponse resp;
        return Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp);
      }
      inference::ModelInferResponse resp;
      return Infer(InferOf("blobs-mlp", randn({1, 2})), &resp);
    }));
  }
  int ok = 0, exhausted = 0;
  for (auto& c : calls) {
    const grpc::Status st = c.get();
    ok += st.ok() ? 1 : 0;
    if (st.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      EXPECT_THAT(st.error_message(), HasSubstr("at once"));
    }
  }
  EXPECT_EQ(ok + exhausted, 12);
  EXPECT_GE(ok, 4);
  EXPECT_GE(exhausted, 1);
  inference::ModelInferResponse resp;
  EXPECT_TRUE(Infer(InferOf("blobs-mlp", randn({2, 2})), &resp).ok());
}

// --- StreamMetrics bounded per job and per server --------------------------------------------

TEST_F(HostileInputTest, StreamsAreBoundedPerJobAndPerServer) {
  Stop();
  ServerOptions o;
  o.limits.max_streams = 3;
  o.limits.max_metric_streams_per_job = 2;
  Start(o);
  const v1::Job a = Submit(BlobsSpec(100000));
  v1::JobSpec second = BlobsSpec(100000);
  second.set_name("second");
  const v1::Job b = Submit(second);
  // A stream counts once its first event has arrived; it is read to its end in the background.
  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<v1::MetricEvent>> reader;
  };
  auto open = [&](const std::string& id, grpc::Status* refused) {
    Open s;
    v1::StreamMetricsRequest req;
    req.set_job_id(id);
    s.reader = training_->StreamMetrics(s.ctx.get(), req);
    v1::MetricEvent e;
    if (!s.reader->Read(&e)) *refused = s.reader->Finish();
    return s;
  };
  grpc::Status st;
  std::vector<Open> streams;
  streams.push_back(open(a.id(), &st));
  streams.push_back(open(a.id(), &st));
  ASSERT_TRUE(st.ok()) << st.error_message();
  Open third = open(a.id(), &st);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("already has 2 StreamMetrics streams"));
  st = grpc::Status::OK;
  streams.push_back(open(b.id(), &st));
  ASSERT_TRUE(st.ok()) << st.error_message();
  Open fourth = open(b.id(), &st);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("the server already serves 3 StreamMetrics streams"));
  // The listings are not held up by the streams.
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(training_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  for (Open& s : streams) s.ctx->TryCancel();
  for (Open& s : streams) {
    v1::MetricEvent e;
    while (s.reader->Read(&e)) {
    }
    s.reader->Finish();
  }
  // Their threads are free again: a new stream is served.
  st = grpc::Status::OK;
  EXPECT_TRUE(WaitUntil([&] {
    st = grpc::Status::OK;
    Open s = open(b.id(), &st);
    if (!st.ok()) return false;  // refused: open() finished it
    s.ctx->TryCancel();
    v1::MetricEvent e;
    while (s.reader->Read(&e)) {
    }
    s.reader->Finish();
    return true;
  }));
  for (const std::string& id : {a.id(), b.id()}) {
    grpc::ClientContext c;
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::Job job;
    training_->CancelJob(&c, cancel, &job);
  }
}

// --- /metrics against slow clients ----------------------------------------------------------

// A connection to 127.0.0.1:<port> whose reads give up after `timeout` (a scrape that would
// hang fails instead).
int ConnectWithTimeout(int port, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

std::string Scrape(int port) {
  const int fd = ConnectWithTimeout(port, std::chrono::seconds(2));
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// The probe's cases: 40 clients sending a header line every so often, and hundreds of idle
// connections, blocked scrapes for 11-17 s. A connection holds no thread now: the scrape is
// answered at once, the head deadline closes the slow ones, the bound evicts the idle ones.
TEST_F(HostileInputTest, SlowAndIdleClientsDoNotDelayAScrape) {
  const int port = server_->metrics_port();
  std::vector<int> slow, idle;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(ConnectWithTimeout(port, std::chrono::seconds(10)));
    (void)!::write(slow.back(), "GET /metrics HTTP/1.1\r\n", 23);
  }
  for (int i = 0; i < 300; ++i) idle.push_back(ConnectWithTimeout(port, std::chrono::seconds(10)));
  EXPECT_THAT(Scrape(port), HasSubstr("200 OK"));
  EXPECT_LE(server_->metrics_connections(), metrics::HttpEndpoint::kMaxConnections);
  // The slow clients keep trickling header lines: the head deadline still closes them (a read
  // returns 0, the server's close), whatever they send.
  for (int round = 0; round < 8; ++round) {
    for (int fd : slow) (void)!::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);  // closed: EPIPE, no signal
    EXPECT_THAT(Scrape(port), HasSubstr("200 OK"));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the client's pace, not an ordering
  }
  int closed = 0;
  for (int fd : slow) {
    char c;
    closed += ::read(fd, &c, 1) == 0 ? 1 : 0;
    ::close(fd);
  }
  EXPECT_EQ(closed, 40);
  for (int fd : idle) ::close(fd);
  EXPECT_THAT(Scrape(port), HasSubstr("200 OK"));
}

// An upload that stalls after its first chunk holds a stream-pool thread only until the stall
// timeout: then it is cancelled, and the next upload is served on the thread it freed.
TEST_F(HostileInputTest, AStalledUploadIsCancelledAndFreesItsThread) {
  Stop();
  ServerOptions o;
  o.limits.max_streams = 1;
  o.limits.stream_stall_timeout = std::chrono::milliseconds(300);
  Start(o);
  grpc::ClientContext ctx;
  v1::Model model;
  auto writer = serving_->RegisterModel(&ctx, &model);
  v1::RegisterModelChunk c;
  c.set_name("stalled");
  c.set_data("onnx bytes that never end");
  ASSERT_TRUE(writer->Write(c));
  // No more chunks, no WritesDone: the server ends the call.
  const grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), StatusCode::CANCELLED) << st.error_message();
  // The one stream-pool thread is free: the next upload gets an answer of its own (the bytes
  // are not a model), not "too many streaming calls".
  EXPECT_TRUE(WaitUntil([&] {
    v1::Model m;
    const grpc::Status next = RegisterModel("next", "not a model", &m);
    return next.error_code() == StatusCode::INVALID_ARGUMENT;
  }));
}

}  // namespace
}  // namespace anvil::server
