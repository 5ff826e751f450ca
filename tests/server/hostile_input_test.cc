// Hostile and unlucky inputs, round two: text that is not UTF-8 (files in the data root and
// request fields), malformed and oversized messages on every RPC, registrations that fail
// half-way, and stored fields that would make every listing fail. Each case asserts the
// documented status and that the listings and the status page keep working for everyone.
#include <nlohmann/json.hpp>

#include "core/data/datasets/image_folder.h"
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

}  // namespace
}  // namespace anvil::server
