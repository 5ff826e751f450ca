// The service as an attacker and an unlucky operator meet it: requests built to make parsing
// expensive, names built to overflow status metadata, floods of Predicts, a drain with calls in
// flight, listeners that must be exactly the ones logged. Each case asserts the documented
// status and that the server keeps serving afterwards.
#include <grpcpp/generic/generic_stub.h>
#include <sys/stat.h>

#include <atomic>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/status.h"
#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

using ::testing::HasSubstr;
using grpc::StatusCode;

class FaultTest : public ServerFixture {
 protected:
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

  // Resident memory of this process (the server runs in it), from /proc.
  static int64_t RssBytes() {
    std::ifstream in("/proc/self/statm");
    int64_t pages = 0, resident = 0;
    in >> pages >> resident;
    return resident * ::sysconf(_SC_PAGESIZE);
  }

  // Trains the blobs MLP to its registered model "blobs-mlp".
  void TrainBlobs() {
    const v1::Job job = Submit(BlobsSpec(1));
    Stream(job.id());
    ASSERT_EQ(Get(job.id()).state(), v1::SUCCEEDED);
  }

  bool Serving() {
    v1::PredictResponse resp;
    return Predict(PredictOf("blobs-mlp", randn({2, 2})), &resp).ok();
  }
};

// Varint encoding (protobuf wire format), for hand-made messages.
void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

TEST_F(FaultTest, MillionsOfEmptyTensorsAreRefusedBeforeParsing) {
  TrainBlobs();
  // ~1 MiB: field 1 (model), then 500k empty `inputs` entries (tag 0x1a, length 0).
  std::string bytes = "\x0a\x09" "blobs-mlp";
  for (int i = 0; i < 500000; ++i) bytes += std::string("\x1a\x00", 2);
  const int64_t rss_before = RssBytes();
  const grpc::Status st = RawCall("/anvil.v1.Serving/Predict", bytes);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("inputs: expected at most 16 tensors"));
  // Parsed, 500k Tensor objects would take ~50 MB; the scan holds nothing of its own.
  EXPECT_LT(RssBytes() - rss_before, int64_t{30} << 20);
  EXPECT_TRUE(Serving());
}

TEST_F(FaultTest, MillionsOfShapeEntriesAreRefusedBeforeParsing) {
  TrainBlobs();
  std::string dims;
  for (int i = 0; i < 400000; ++i) PutVarint(dims, 1);
  std::string tensor = "\x1a";  // field 3 (shape), packed
  PutVarint(tensor, dims.size());
  tensor += dims;
  std::string bytes = "\x0a\x09" "blobs-mlp" "\x1a";
  PutVarint(bytes, tensor.size());
  bytes += tensor;
  const grpc::Status st = RawCall("/anvil.v1.Serving/Predict", bytes);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("inputs[0].shape: expected at most 32 dims"));
  // The same count unpacked (one tag per entry) is refused too.
  std::string unpacked;
  for (int i = 0; i < 200000; ++i) unpacked += "\x18\x01";
  std::string bytes2 = "\x1a";
  PutVarint(bytes2, unpacked.size());
  bytes2 += unpacked;
  EXPECT_EQ(RawCall("/anvil.v1.Serving/Predict", bytes2).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Serving());
}

TEST_F(FaultTest, MalformedWireDataIsInvalidArgument) {
  TrainBlobs();
  const std::vector<std::string> cases = {
      std::string("\x1a\xff\xff\xff\xff\x0f", 6),  // a length past the end
      std::string("\x1a\x05\x0a\x09", 4),          // a tensor cut inside its name
      std::string("\x0b\x0c", 2),                  // a group (wire type 3)
      std::string("\x00\x01", 2),                  // field number 0
      std::string("\x0f", 1),                      // wire type 7
  };
  for (const std::string& bytes : cases) {
    const grpc::Status st = RawCall("/anvil.v1.Serving/Predict", bytes);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("malformed"));
  }
  // A well-formed request through the raw path still works, unknown fields and all.
  v1::PredictRequest req = PredictOf("blobs-mlp", randn({3, 2}));
  std::string bytes = req.SerializeAsString() + std::string("\xf8\x07\x01", 3);  // field 127, varint
  std::string reply;
  ASSERT_TRUE(RawCall("/anvil.v1.Serving/Predict", bytes, &reply).ok());
  v1::PredictResponse resp;
  ASSERT_TRUE(resp.ParseFromString(reply));
  EXPECT_EQ(resp.outputs(0).shape(0), 3);
}

TEST_F(FaultTest, HugeNamesAreNotEchoedWhole) {
  const std::string name(512 << 10, 'm');  // half the fixture's message limit
  v1::PredictResponse resp;
  grpc::ClientContext ctx;
  v1::PredictRequest req = PredictOf(name, randn({1, 2}));
  grpc::Status st = serving_->Predict(&ctx, req, &resp);
  // The name limit: refused on the wire, the message short.
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("model: expected at most 1024 bytes"));
  // GetModel and GetJob echo the name or id capped, and still answer NOT_FOUND.
  grpc::ClientContext c2;
  v1::GetModelRequest get;
  get.set_name(name);
  v1::Model model;
  st = serving_->GetModel(&c2, get, &model);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
  EXPECT_LT(st.error_message().size(), 300u);
  EXPECT_THAT(st.error_message(), HasSubstr("\u2026"));
  grpc::ClientContext c3;
  v1::GetJobRequest job;
  job.set_job_id(std::string(500000, 'j'));
  v1::Job j;
  st = training_->GetJob(&c3, job, &j);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
  EXPECT_LT(st.error_message().size(), 300u);
}

TEST_F(FaultTest, OversizedJobSpecIsResourceExhausted) {
  Stop();
  ServerOptions o;
  o.limits.training_message_bytes = 256 << 10;  // below the channel's 1 MiB: the service's own check
  Start(o);
  v1::JobSpec spec = BlobsSpec();
  spec.set_model_preset("");
  spec.set_model_json(std::string(300 << 10, ' ') + "{}");
  grpc::Status st;
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("the Training service takes at most"));
}

TEST_F(FaultTest, PredictOnAModelStillTrainingIsFailedPrecondition) {
  v1::JobSpec spec = BlobsSpec(100000);
  spec.set_name("slow");
  const v1::Job job = Submit(spec);
  v1::PredictResponse resp;
  grpc::Status st = Predict(PredictOf("slow", randn({1, 2})), &resp);
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr(job.id()));
  // Cancel answers how the job ended, not RUNNING.
  while (Get(job.id()).state() != v1::RUNNING) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  v1::Job after;
  ASSERT_TRUE(training_->CancelJob(&ctx, cancel, &after).ok());
  EXPECT_EQ(after.state(), v1::CANCELLED);
  // Nothing registers "slow" now: NOT_FOUND.
  st = Predict(PredictOf("slow", randn({1, 2})), &resp);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
}

TEST_F(FaultTest, NamedHealthServicesAnswerAndReflectionIsOff) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const std::string service : {"", "anvil.v1.Training", "anvil.v1.Serving"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  const grpc::Status st = RawCall("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "");
  EXPECT_EQ(st.error_code(), StatusCode::UNIMPLEMENTED);
}

// The socket inodes this process listens on over TCP (from /proc: fds, then the tables).
std::set<int> ListeningPorts() {
  std::set<std::string> inodes;
  for (const auto& fd : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode) > 0) ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

TEST_F(FaultTest, PortZeroOpensExactlyTheLoggedPort) {
  std::set<int> ports = ListeningPorts();
  ports.erase(server_->metrics_port());
  EXPECT_EQ(ports, std::set<int>({server_->port()}));
}

TEST_F(FaultTest, InFlightPredictsFinishThroughTheDrain) {
  Stop();
  ServerOptions o;
  o.batching.max_batch = 64;
  o.batching.max_delay = std::chrono::milliseconds(300);  // each call waits here while the drain starts
  Start(o);
  TrainBlobs();
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < 30; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      v1::PredictResponse resp;
      return Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp);
    }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  server_->shutdown(std::chrono::seconds(5));
  const double drain_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int ok = 0;
  for (auto& c : calls) {
    const grpc::Status st = c.get();
    ok += st.ok() ? 1 : 0;
    if (!st.ok()) ADD_FAILURE() << grpc_code_name(st.error_code()) << ": " << st.error_message();
  }
  EXPECT_EQ(ok, 30);
  EXPECT_LT(drain_s, 5.0);
  // After the drain, a new call is refused (the port is closed).
  v1::PredictResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  EXPECT_FALSE(serving_->Predict(&ctx, PredictOf("blobs-mlp", randn({1, 2})), &resp).ok());
}

TEST_F(FaultTest, APredictFloodBeyondTheQueueIsResourceExhausted) {
  Stop();
  ServerOptions o;
  o.batching.max_batch = 64;
  o.batching.max_delay = std::chrono::milliseconds(400);
  o.limits.max_concurrent_predicts = 2;
  o.limits.max_predict_queue = 2;
  Start(o);
  TrainBlobs();
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < 12; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      v1::PredictResponse resp;
      return Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp);
    }));
  }
  int ok = 0, exhausted = 0;
  for (auto& c : calls) {
    const grpc::Status st = c.get();
    ok += st.ok() ? 1 : 0;
    if (st.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      EXPECT_THAT(st.error_message(), HasSubstr("too many Predicts at once"));
    }
  }
  EXPECT_EQ(ok + exhausted, 12);
  EXPECT_GE(ok, 4);
  EXPECT_GE(exhausted, 1);
  EXPECT_TRUE(Serving());
}

}  // namespace
}  // namespace anvil::server
