// The service as an attacker and an unlucky operator meet it: requests built to make parsing
// expensive, names built to overflow status metadata, floods of Predicts, a drain with calls in
// flight, listeners that must be exactly the ones logged. Each case asserts the documented
// status and that the server keeps serving afterwards.
#include <grpcpp/generic/generic_stub.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include "core/data/datasets/image_folder.h"
#include "core/util/fault_point.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/status.h"
#include "server/store_sqlite.h"
#include "server/tokens.h"
#include "tests/paths.h"
#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

using grpc::StatusCode;
using ::testing::HasSubstr;
using ::testing::Not;

class FaultTest : public ServerFixture {
 public:
  using ServerFixture::BlobsSpec;
  using ServerFixture::Stop;
  using ServerFixture::Submit;
  using ServerFixture::WaitUntil;

 protected:
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

  // The job's state messages, read from its stream for `seconds` (the job keeps running).
  std::vector<std::string> StateMessages(const std::string& id, double seconds) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000)));
    v1::StreamMetricsRequest req;
    req.set_job_id(id);
    auto reader = training_->StreamMetrics(&ctx, req);
    std::vector<std::string> out;
    v1::MetricEvent e;
    while (reader->Read(&e)) {
      if (e.event_case() == v1::MetricEvent::kState) out.push_back(e.message());
    }
    reader->Finish();
    return out;
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
  std::string bytes =
      "\x0a\x09"
      "blobs-mlp";
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
  std::string bytes =
      "\x0a\x09"
      "blobs-mlp"
      "\x1a";
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
  ASSERT_TRUE(WaitUntil([&] { return Get(job.id()).state() == v1::RUNNING; }));
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
  {  // an unknown name: NOT_FOUND for Check, as the protocol says
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("no.such.Service");
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_EQ(health->Check(&ctx, req, &resp).error_code(), StatusCode::NOT_FOUND);
  }
  const grpc::Status st = RawCall("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "");
  EXPECT_EQ(st.error_code(), StatusCode::UNIMPLEMENTED);
}

// Watch sends the status, then its changes: a drain turns SERVING into NOT_SERVING for every
// watcher (a load balancer stops sending new calls); an unknown name streams SERVICE_UNKNOWN.
TEST_F(FaultTest, HealthWatchersSeeTheDrain) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("anvil.v1.Serving");
  auto watch = health->Watch(&ctx, req);
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  grpc::ClientContext unknown_ctx;
  req.set_service("no.such.Service");
  auto unknown = health->Watch(&unknown_ctx, req);
  ASSERT_TRUE(unknown->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN);
  unknown_ctx.TryCancel();
  while (unknown->Read(&resp)) {
  }
  unknown->Finish();
  std::thread stop([this] { server_->shutdown(std::chrono::seconds(2)); });
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  while (watch->Read(&resp)) {
  }
  watch->Finish();
  stop.join();
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
      if (state == "0A" && inodes.count(inode) > 0)
        ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
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
  // Each call waits here while the drain starts; long enough that all 30 are admitted first
  // even where threads start slowly (under ThreadSanitizer they took over 100 ms).
  o.batching.max_delay = std::chrono::milliseconds(800);
  Start(o);
  TrainBlobs();
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < 30; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      v1::PredictResponse resp;
      return Predict(PredictOf("blobs-mlp", randn({1, 2})), &resp);
    }));
  }
  // The drain starts once the server holds all 30: each is queued or already answered, as the
  // server's own counters say (queue depth, plus the rows its batches ran).
  ASSERT_TRUE(WaitUntil([&] {
    return MetricValue("anvil_predict_queue_depth{model=\"blobs-mlp\"}") +
               MetricValue("anvil_predict_batch_rows_sum{model=\"blobs-mlp\"}") >=
           30;
  }));
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

// A model_json of `layers` (a JSON array body) on the blobs data ([2] inputs).
std::string ModelJson(const std::string& layers) { return R"({"input_shape": [2], "layers": [)" + layers + "]}"; }

TEST_F(FaultTest, AJobThatCannotFitIsRefusedAtSubmitWithTheEstimate) {
  Stop();
  ServerOptions o;
  o.max_job_memory = int64_t{1} << 30;
  Start(o);
  v1::JobSpec spec = BlobsSpec();
  spec.set_model_preset("");
  spec.set_model_json(ModelJson(R"({"type": "flatten"}, {"type": "linear", "out_features": 20000},
      {"type": "linear", "out_features": 20000}, {"type": "linear", "out_features": 10})"));
  grpc::Status st;
  {  // the call pool's first thread (a sanitizer's per-thread state is megabytes) before measuring
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(training_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  }
  const int64_t rss_before = RssBytes();
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("the job needs about"));
  EXPECT_THAT(st.error_message(), HasSubstr("adamw state"));
  EXPECT_THAT(st.error_message(), HasSubstr("--max-job-memory"));
  // 10^12 parameters: priced, never allocated.
  spec.set_model_json(
      ModelJson(R"({"type": "linear", "out_features": 1000000}, {"type": "linear", "out_features": 1000000})"));
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("TiB"));
  EXPECT_LT(RssBytes() - rss_before, int64_t{64} << 20);  // the 400M-parameter model was never built
  // A dry run prices the same way, and so does a preset once the data gives its size.
  v1::SubmitJobRequest dry;
  *dry.mutable_spec() = spec;
  dry.set_dry_run(true);
  v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  EXPECT_EQ(training_->SubmitJob(&ctx, dry, &resp).error_code(), StatusCode::RESOURCE_EXHAUSTED);
  // A model that fits is accepted and trains.
  spec.set_model_json(ModelJson(R"({"type": "linear", "out_features": 16}, {"type": "relu"},
      {"type": "linear", "out_features": 4})"));  // blobs has 4 classes
  spec.set_epochs(1);
  const v1::Job job = Submit(spec);
  Stream(job.id());
  EXPECT_EQ(Get(job.id()).state(), v1::SUCCEEDED) << Get(job.id()).reason();
}

TEST_F(FaultTest, ModelSpecsAreBoundedInLayersAndBytes) {
  auto relus = [](int n) {
    std::string layers = R"({"type": "linear", "out_features": 4})";  // blobs has 4 classes
    for (int i = 0; i < n; ++i) layers += R"(, {"type": "relu"})";
    return layers;
  };
  v1::JobSpec spec = BlobsSpec();
  spec.set_model_preset("");
  grpc::Status st;
  v1::SubmitJobRequest req;
  v1::SubmitJobResponse resp;
  req.set_dry_run(true);
  // 9999 layers: within the bound, checked without building anything.
  spec.set_model_json(ModelJson(relus(9998)));
  *req.mutable_spec() = spec;
  {
    grpc::ClientContext ctx;
    st = training_->SubmitJob(&ctx, req, &resp);
  }
  EXPECT_TRUE(st.ok()) << st.error_message();
  spec.set_model_json(ModelJson(relus(10000)));
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("more than 10000 layers"));
  // Nested layers count too: a residual inside a residual ...
  std::string nested = R"({"type": "relu"})";
  for (int i = 0; i < 10001; ++i) nested = R"({"type": "residual", "layers": [)" + nested + "]}";
  spec.set_model_json(ModelJson(nested));
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("nested more than 32 residuals deep"));
  // Beyond 1 MiB of text: refused before it is parsed.
  spec.set_model_json(ModelJson(relus(9000) + std::string(1 << 20, ' ')));
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("expected at most 1048576"));
}

// A process that died leaves its job RUNNING (a drain leaves INTERRUPTED): writes that state,
// as a crash would have left it.
// `checkpoint`: the published checkpoint the row names ("" leaves it).
void MarkRunningAsACrashLeavesIt(const fs::path& db, const std::string& id, const std::string& checkpoint = "") {
  SqliteStore store(db.string());
  JobRow row = *store.get_job(id);
  row.state = JobState::kRunning;
  if (!checkpoint.empty()) row.checkpoint = checkpoint;
  store.update_job(row);
}

TEST_F(FaultTest, AJobTheServerDiesUnderAtTheSameStepIsResumedTwiceThenFailed) {
  v1::JobSpec spec = BlobsSpec(100000);
  spec.set_name("crasher");
  const v1::Job job = Submit(spec);
  ASSERT_TRUE(WaitUntil([&] { return Get(job.id()).state() == v1::RUNNING && Get(job.id()).step() > 0; }));
  Stop();
  // The job's files and the checkpoint its row names as the first stop left them: put back
  // before every start, so each run resumes from the same checkpoint, as a job that kills the
  // server at the same step would (it never gets to publish a newer one).
  const fs::path folder = root_ / "data" / "jobs" / job.id();
  const fs::path kept = root_ / "kept-job-folder";
  fs::copy(folder, kept, fs::copy_options::recursive);
  const std::string kept_checkpoint = SqliteStore((root_ / "data" / "anvil.db").string()).get_job(job.id())->checkpoint;
  ASSERT_THAT(kept_checkpoint, HasSubstr("/checkpoints/"));
  for (int start = 1; start <= 3; ++start) {
    fs::remove_all(folder);
    fs::copy(kept, folder, fs::copy_options::recursive);
    MarkRunningAsACrashLeavesIt(root_ / "data" / "anvil.db", job.id(), kept_checkpoint);
    Start();
    const v1::Job now = Get(job.id());
    if (start <= 2) {
      EXPECT_NE(now.state(), v1::FAILED) << start;
      // The reason of the resume, as recorded in the job's event stream.
      bool said = false;
      for (const std::string& m : StateMessages(job.id(), 0.5)) {
        said = said || m.find("the server stopped under it " + std::to_string(start) +
                              " of at most 2 times without progress") != std::string::npos;
      }
      EXPECT_TRUE(said) << start;
    } else {
      EXPECT_EQ(now.state(), v1::FAILED);
      EXPECT_THAT(now.reason(), HasSubstr("the server stopped while running it 3 times with no progress between"));
    }
    Stop();
  }
}

// kill -9 at steps 0, 22 and 60 of a long job must not fail it: each stop came after progress
// (a newer checkpoint), so none counts against the job beyond the first at its step.
TEST_F(FaultTest, AJobThatProgressesBetweenServerDeathsIsNeverFailed) {
  v1::JobSpec spec = BlobsSpec(100000);
  spec.set_name("preempted");
  const v1::Job job = Submit(spec);
  ASSERT_TRUE(WaitUntil([&] { return Get(job.id()).step() > 0; }));
  Stop();  // the drain checkpoints at the step it reached
  for (int start = 1; start <= 4; ++start) {
    MarkRunningAsACrashLeavesIt(root_ / "data" / "anvil.db", job.id());
    Start();
    const v1::Job now = Get(job.id());
    ASSERT_NE(now.state(), v1::FAILED) << start << ": " << now.reason();
    // At least the resumed checkpoint's step: one step beyond it is progress.
    const int64_t resumed = now.step();
    ASSERT_TRUE(WaitUntil([&] { return Get(job.id()).step() > resumed; })) << start;
    Stop();
  }
  Start();
  EXPECT_NE(Get(job.id()).state(), v1::FAILED);
  // Every resume counted as the first without progress, none as the second.
  int first = 0, second = 0;
  for (const std::string& m : StateMessages(job.id(), 0.5)) {
    first += m.find("the server stopped under it 1 of at most 2 times") != std::string::npos;
    second += m.find("the server stopped under it 2 of at most 2 times") != std::string::npos;
  }
  EXPECT_EQ(first, 4);
  EXPECT_EQ(second, 0);
}

TEST_F(FaultTest, AnEmptyStoreFileRefusesToStart) {
  const v1::Job job = Submit(BlobsSpec(1));
  Stream(job.id());
  Stop();
  const fs::path db = root_ / "data" / "anvil.db";
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
  std::ofstream(db, std::ios::trunc).close();
  ServerOptions o;
  o.address = "127.0.0.1:0";
  o.data_dir = (root_ / "data").string();
  AnvilServer server(o);
  try {
    server.start();
    ADD_FAILURE() << "started on a 0-byte store";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("is empty (0 bytes)"));
    EXPECT_THAT(e.what(), HasSubstr("1 job folder(s)"));
    EXPECT_THAT(e.what(), HasSubstr("anvild --repair"));
  }
  const std::string report = AnvilServer::repair_report(o.data_dir);
  EXPECT_THAT(report, HasSubstr("size: 0 bytes"));
  EXPECT_THAT(report, HasSubstr("mv "));
  EXPECT_THAT(report, HasSubstr("Nothing was changed"));
  EXPECT_EQ(fs::file_size(db), 0u);
}

TEST_F(FaultTest, ADatasetSwappedForASymlinkWhileQueuedIsRefusedWhenOpened) {
  const fs::path data = root_ / "data";
  const fs::path outside = root_ / "outside";
  const Tensor pixels = zeros({8, 8, 3}, kUInt8);
  for (const fs::path& dir : {data / "pets", outside}) {
    for (const char* cls : {"cat", "dog"}) {
      fs::create_directories(dir / cls);
      for (int i = 0; i < 4; ++i) data::write_png((dir / cls / (std::to_string(i) + ".png")).string(), pixels);
    }
  }
  // The worker is busy, so the image job waits in the queue after its submit-time checks.
  v1::JobSpec busy = BlobsSpec(100000);
  busy.set_name("busy");
  const v1::Job first = Submit(busy);
  v1::JobSpec spec;
  spec.set_name("pets");
  spec.set_model_preset("mlp");
  spec.mutable_dataset()->set_path("pets");
  spec.set_epochs(1);
  const v1::Job job = Submit(spec);
  ASSERT_EQ(Get(job.id()).state(), v1::QUEUED);
  fs::rename(data / "pets", root_ / "pets-moved");
  fs::create_directory_symlink(outside, data / "pets");
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_job_id(first.id());
  v1::Job cancelled;
  ASSERT_TRUE(training_->CancelJob(&ctx, cancel, &cancelled).ok());
  Stream(job.id());
  const v1::Job after = Get(job.id());
  EXPECT_EQ(after.state(), v1::FAILED);
  EXPECT_THAT(after.reason(), HasSubstr("leads outside"));
  // A symlink inside a class folder pointing out fails the job the same way.
  fs::remove(data / "pets");
  fs::rename(root_ / "pets-moved", data / "pets");
  fs::create_symlink(outside / "cat" / "0.png", data / "pets" / "cat" / "stolen.png");
  spec.set_name("pets2");
  const v1::Job second = Submit(spec);
  Stream(second.id());
  EXPECT_EQ(Get(second.id()).state(), v1::FAILED);
  EXPECT_THAT(Get(second.id()).reason(), HasSubstr("a symbolic link leading outside"));
}

// --- Checkpoints with generations -----------------------------------------------------------

// A job that checkpoints every 5 steps, run until it has written at least two checkpoints,
// then drained (INTERRUPTED: it resumes on the next start).
v1::Job InterruptedAfterTwoCheckpoints(FaultTest& t, const fs::path& job_dir) {
  v1::JobSpec spec = FaultTest::BlobsSpec(100000);
  spec.set_name("ckpt");
  spec.mutable_checkpoint()->set_every_steps(5);
  const v1::Job job = t.Submit(spec);
  const fs::path older = job_dir / job.id() / "checkpoint.1.safetensors";
  EXPECT_TRUE(FaultTest::WaitUntil([&] { return fs::exists(older); }));
  t.Stop();
  return job;
}

void FlipByte(const fs::path& p, size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

TEST_F(FaultTest, ACorruptNewestCheckpointFallsBackToThePreviousOne) {
  const fs::path jobs = root_ / "data" / "jobs";
  const v1::Job job = InterruptedAfterTwoCheckpoints(*this, jobs);
  const fs::path newest = jobs / job.id() / "checkpoint.safetensors";
  FlipByte(newest, 20);  // inside the JSON header
  Start();
  EXPECT_TRUE(WaitUntil([&] { return Get(job.id()).state() == v1::RUNNING; }));
  bool fell_back = false;
  for (const std::string& m : StateMessages(job.id(), 0.5)) {
    // The newest published checkpoint is the local newest (a hard link): corrupt as well.
    fell_back = fell_back || m.find("resumed from an older checkpoint, e") != std::string::npos;
  }
  EXPECT_TRUE(fell_back);
  EXPECT_EQ(Get(job.id()).state(), v1::RUNNING);
}

TEST_F(FaultTest, EveryCheckpointCorruptFailsTheJobInsteadOfRestartingFromZero) {
  const fs::path jobs = root_ / "data" / "jobs";
  const v1::Job job = InterruptedAfterTwoCheckpoints(*this, jobs);
  // The newest emptied, the previous one with a header-length bomb (2^60 bytes), and every
  // published copy (the artifact store's, jobs/ID/checkpoints/) emptied too.
  for (const auto& e : fs::directory_iterator(jobs / job.id() / "checkpoints")) {
    if (e.path().extension() == ".safetensors") std::ofstream(e.path(), std::ios::trunc).close();
  }
  std::ofstream(jobs / job.id() / "checkpoint.safetensors", std::ios::trunc).close();
  {
    std::fstream f(jobs / job.id() / "checkpoint.1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t bomb = uint64_t{1} << 60;
    f.write(reinterpret_cast<const char*>(&bomb), 8);
  }
  Start();
  Stream(job.id());
  const v1::Job after = Get(job.id());
  EXPECT_EQ(after.state(), v1::FAILED);
  EXPECT_THAT(after.reason(), HasSubstr("DATA_LOSS: no checkpoint of this job verifies"));
  EXPECT_THAT(after.reason(), HasSubstr("checkpoint.1.safetensors is unusable"));
}

// A broken invariant inside the server is not the client's fault: INTERNAL (not
// INVALID_ARGUMENT), with where it happened, and the server keeps serving.
TEST_F(FaultTest, AnInternalErrorIsInternalAndSaysWhere) {
  TrainBlobs();
  ASSERT_TRUE(Serving());
  set_fault_point("serving:predict=internal");
  v1::PredictResponse resp;
  const grpc::Status st = Predict(PredictOf("blobs-mlp", randn({2, 2})), &resp);
  set_fault_point("");
  EXPECT_EQ(st.error_code(), StatusCode::INTERNAL) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("internal error at "));
  EXPECT_THAT(st.error_message(), HasSubstr("model_registry.cc:"));  // where
  EXPECT_THAT(st.error_message(), HasSubstr("a bug in Anvil"));
  EXPECT_TRUE(Serving());
}

TEST_F(FaultTest, AFullDiskIsResourceExhaustedWithTheReasonAndTheServerKeepsServing) {
  Stop();
  ServerOptions o;
  o.store_max_pages = 24;  // a store that fills after a few jobs, as a full disk does
  Start(o);
  grpc::Status st;
  int accepted = 0;
  v1::JobSpec spec = BlobsSpec(1);
  spec.set_model_json(std::string(2000, ' ') +
                      R"({"input_shape": [2], "layers": [{"type": "linear", "out_features": 4}]})");
  spec.set_model_preset("");
  for (int i = 0; i < 200; ++i) {
    spec.set_name("fill-" + std::to_string(i));
    Submit(spec, &st);
    if (!st.ok()) break;
    ++accepted;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("the server's disk is full"));
  EXPECT_THAT(st.error_message(), Not(HasSubstr(root_.string())));  // no server paths
  // Reads still work.
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(training_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
}

// --- The metrics and status endpoint --------------------------------------------------------

TEST_F(FaultTest, IdleConnectionsDoNotBlockMetricsAndOnlyGetIsServed) {
  const int port = server_->metrics_port();
  // Idle, half-open connections that never send a request.
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string status;
  const std::string body = HttpGet(port, "/metrics", &status);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_THAT(status, HasSubstr("200"));
  EXPECT_THAT(body, HasSubstr("anvil_"));
  EXPECT_LT(seconds, 2.0);  // was ~30 s with two idle connections and two threads
  for (int fd : idle) ::close(fd);
  for (const char* method : {"POST", "PUT", "DELETE"}) {
    const std::string r = RawHttp(
        port, std::string(method) + " /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    EXPECT_THAT(r, HasSubstr("405 Method Not Allowed")) << method;
    EXPECT_THAT(r, HasSubstr("Allow: GET, HEAD")) << method;
  }
  const std::string head = RawHttp(port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("200 OK"));
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");  // headers only
}

// --- Authentication and transport security -----------------------------------------------

grpc::Status CallWithToken(v1::Training::Stub& training, const std::string& token) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", token);
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  return training.ListJobs(&ctx, req, &resp);
}

TEST_F(FaultTest, TokensWithScopesAreEnforcedAndHealthStaysOpen) {
  Stop();
  const std::string file = (root_ / "data" / "tokens.json").string();
  fs::create_directories(root_ / "data");
  const std::string trainer = create_token(file, "trainer", {Scope::kTrain});
  const std::string server_token = create_token(file, "server", {Scope::kServe});
  const std::string admin = create_token(file, "ops", {Scope::kAdmin});
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::others_read, fs::perms::none);  // 0600
  // The file holds hashes only: no token text in it.
  std::ifstream in(file);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content.find(trainer.substr(6)), std::string::npos);
  Start();

  grpc::Status st = CallWithToken(*training_, "");
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("expected a bearer token"));
  EXPECT_EQ(CallWithToken(*training_, "Bearer anvil_0000").error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallWithToken(*training_, "Basic " + trainer).error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(CallWithToken(*training_, "Bearer " + trainer).ok());
  EXPECT_TRUE(CallWithToken(*training_, "Bearer " + admin).ok());
  st = CallWithToken(*training_, "Bearer " + server_token);
  EXPECT_EQ(st.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("lacks the \"train\" scope"));
  // Predict (the raw path) checks too.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + trainer);
    v1::PredictResponse resp;
    EXPECT_EQ(serving_->Predict(&ctx, PredictOf("m", randn({1, 2})), &resp).error_code(),
              StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    v1::PredictResponse resp;
    EXPECT_EQ(serving_->Predict(&ctx, PredictOf("m", randn({1, 2})), &resp).error_code(), StatusCode::UNAUTHENTICATED);
  }
  // Every method checks, streams and uploads included (each is a raw callback method now).
  auto stream_status = [&](const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", token);
    v1::StreamMetricsRequest req;
    req.set_job_id("job-000000000000");
    auto reader = training_->StreamMetrics(&ctx, req);
    v1::MetricEvent e;
    while (reader->Read(&e)) {
    }
    return reader->Finish().error_code();
  };
  EXPECT_EQ(stream_status(""), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stream_status("Bearer " + server_token), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(stream_status("Bearer " + trainer), StatusCode::NOT_FOUND);  // past the check: no such job
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + server_token);
    v1::Model model;
    auto writer = serving_->RegisterModel(&ctx, &model);
    v1::RegisterModelChunk c;
    c.set_name("m");
    writer->Write(c);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), StatusCode::PERMISSION_DENIED);  // registering is "train"
  }
  {
    grpc::ClientContext ctx;
    v1::ExportRequest req;
    req.set_model("m");
    auto reader = serving_->Export(&ctx, req);
    v1::ExportChunk chunk;
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), StatusCode::UNAUTHENTICATED);
  }
  // Health needs no token.
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext hctx;
  grpc::health::v1::HealthCheckResponse hresp;
  EXPECT_TRUE(health->Check(&hctx, grpc::health::v1::HealthCheckRequest(), &hresp).ok());
  // A revoked token stops working while the server runs (the file is re-read within a second).
  ASSERT_TRUE(revoke_token(file, "trainer"));
  EXPECT_TRUE(WaitUntil(
      [&] { return CallWithToken(*training_, "Bearer " + trainer).error_code() == StatusCode::UNAUTHENTICATED; }));
  EXPECT_TRUE(CallWithToken(*training_, "Bearer " + admin).ok());
  // A corrupted file fails closed: no token is accepted.
  std::ofstream(file, std::ios::trunc) << "{ not json";
  EXPECT_TRUE(WaitUntil(
      [&] { return CallWithToken(*training_, "Bearer " + admin).error_code() == StatusCode::UNAUTHENTICATED; }));
  st = CallWithToken(*training_, "Bearer " + admin);
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("cannot read its token file"));
}

TEST_F(FaultTest, ANonLoopbackAddressNeedsTlsTokensOrInsecure) {
  Stop();
  ServerOptions o;
  o.address = "0.0.0.0:0";
  o.data_dir = (root_ / "data").string();
  {
    AnvilServer server(o);
    try {
      server.start();
      ADD_FAILURE() << "listened on 0.0.0.0 with no TLS and no tokens";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), HasSubstr("--insecure"));
    }
  }
  o.insecure = true;
  AnvilServer server(o);
  EXPECT_NO_THROW(server.start());
  server.shutdown(std::chrono::seconds(2));
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_F(FaultTest, MutualTlsRefusesClientsWithoutACertificate) {
  Stop();
  const fs::path ca = root_ / "ca";
  ASSERT_EQ(
      std::system(("'" + anvil::test::SourceDir() + "/scripts/dev-ca.sh' '" + ca.string() + "' > /dev/null").c_str()),
      0);
  ServerOptions o;
  o.address = "127.0.0.1:0";
  o.metrics_address = "";
  o.data_dir = (root_ / "data").string();
  o.tls_cert = (ca / "server.pem").string();
  o.tls_key = (ca / "server.key").string();
  o.tls_client_ca = (ca / "ca.pem").string();
  AnvilServer server(o);
  server.start();
  // An IP literal (the certificate names 127.0.0.1 too): no DNS lookup, whose resolver leaks
  // under LeakSanitizer in Debian's c-ares.
  const std::string target = "127.0.0.1:" + std::to_string(server.port());
  auto call = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    auto stub = v1::Training::NewStub(grpc::CreateChannel(target, creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListJobsResponse resp;
    return stub->ListJobs(&ctx, v1::ListJobsRequest(), &resp);
  };
  grpc::SslCredentialsOptions with_cert;
  with_cert.pem_root_certs = ReadAll(ca / "ca.pem");
  with_cert.pem_cert_chain = ReadAll(ca / "client.pem");
  with_cert.pem_private_key = ReadAll(ca / "client.key");
  EXPECT_TRUE(call(grpc::SslCredentials(with_cert)).ok());
  grpc::SslCredentialsOptions no_cert;
  no_cert.pem_root_certs = with_cert.pem_root_certs;
  EXPECT_FALSE(call(grpc::SslCredentials(no_cert)).ok());
  EXPECT_FALSE(call(grpc::InsecureChannelCredentials()).ok());
  server.shutdown(std::chrono::seconds(2));
}

}  // namespace
}  // namespace anvil::server
