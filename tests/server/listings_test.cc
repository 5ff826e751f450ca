// Listings whose cost does not grow with history: bounded spec fields, pages (AIP-158) with
// summaries, DeleteJob and the retention of finished jobs. The probe's case: 20 jobs with a
// 3.5 MiB label_column made every ListJobs fail for everyone, for good.
#include <set>

#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

using grpc::StatusCode;
using ::testing::HasSubstr;

class ListingsTest : public ServerFixture {
 protected:
  // A job that fails at once (its CSV's header has the label column, submit's check, but a
  // later row is not a number): a finished row in a few ms.
  v1::Job FailFast(const std::string& name, const std::string& label = "y") {
    const std::string file = "tiny-" + std::to_string(std::hash<std::string>{}(label)) + ".csv";
    if (!fs::exists(root_ / "data" / file))
      std::ofstream(root_ / "data" / file) << "a,b," << label << "\n1,2,0\n3,x,1\n";
    v1::JobSpec spec = BlobsSpec(1);
    spec.set_name(name);
    spec.mutable_dataset()->clear_name();
    spec.mutable_dataset()->set_path(file);
    spec.mutable_dataset()->set_label_column(label);
    const v1::Job job = Submit(spec);
    Stream(job.id());
    EXPECT_EQ(Get(job.id()).state(), v1::FAILED);
    return job;
  }

  grpc::Status List(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
    grpc::ClientContext ctx;
    return training_->ListJobs(&ctx, req, resp);
  }

  grpc::Status Delete(const std::string& id) {
    grpc::ClientContext ctx;
    v1::DeleteJobRequest req;
    req.set_job_id(id);
    v1::DeleteJobResponse resp;
    return training_->DeleteJob(&ctx, req, &resp);
  }

  std::vector<std::string> AllIds() {
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    v1::ListJobsResponse resp;
    EXPECT_TRUE(List(req, &resp).ok());
    std::vector<std::string> ids;
    for (const v1::Job& j : resp.jobs()) ids.push_back(j.id());
    return ids;
  }
};

TEST_F(ListingsTest, EveryStoredTextFieldIsBoundedAtSubmit) {
  v1::JobSpec spec = BlobsSpec(1);
  spec.mutable_dataset()->set_label_column(std::string(1 << 20, 'x'));
  grpc::Status st;
  Submit(spec, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.dataset.label_column: 1048576 bytes; expected at most 1024"));
  spec = BlobsSpec(1);
  spec.set_loss(std::string(5000, 'l'));
  Submit(spec, &st);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.loss: 5000 bytes; expected at most 1024"));
  spec = BlobsSpec(1);
  spec.mutable_optimizer()->set_name(std::string(2000, 'o'));
  Submit(spec, &st);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.optimizer.name: 2000 bytes"));
  // 20 jobs at the bound: the listing of all of them is well within any message limit.
  for (int i = 0; i < 20; ++i) FailFast("long" + std::to_string(i), std::string(1024, 'z'));
  v1::ListJobsResponse resp;
  ASSERT_TRUE(List(v1::ListJobsRequest(), &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 20);
  EXPECT_LT(resp.ByteSizeLong(), 200u * 1024);
}

TEST_F(ListingsTest, JobsArePagedNewestFirstWithSummaries) {
  std::vector<std::string> made;
  for (int i = 0; i < 7; ++i) made.push_back(FailFast("job" + std::to_string(i)).id());
  std::vector<std::string> seen;
  v1::ListJobsRequest req;
  req.set_page_size(3);
  std::vector<int> sizes;
  while (true) {
    v1::ListJobsResponse page;
    ASSERT_TRUE(List(req, &page).ok());
    sizes.push_back(page.jobs_size());
    for (const v1::Job& j : page.jobs()) {
      seen.push_back(j.id());
      EXPECT_FALSE(j.has_spec()) << "a listing holds summaries";
      EXPECT_FALSE(j.reason().empty());
    }
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(sizes, std::vector<int>({3, 3, 1}));
  EXPECT_EQ(seen, std::vector<std::string>(made.rbegin(), made.rend()));
  // The whole job, with its spec: GetJob, or view FULL.
  EXPECT_TRUE(Get(made[0]).has_spec());
  v1::ListJobsRequest full;
  full.set_view(v1::JOB_VIEW_FULL);
  v1::ListJobsResponse page;
  ASSERT_TRUE(List(full, &page).ok());
  EXPECT_TRUE(page.jobs(0).has_spec());
  // An older client's limit is its page size; with no size at all, the default page.
  v1::ListJobsRequest old;
  old.set_limit(2);
  ASSERT_TRUE(List(old, &page).ok());
  EXPECT_EQ(page.jobs_size(), 2);
  EXPECT_FALSE(page.next_page_token().empty());
  // Tokens are checked: another filter's, or garbage, is INVALID_ARGUMENT; so is a size < 0.
  v1::ListJobsRequest first;
  first.set_page_size(3);
  ASSERT_TRUE(List(first, &page).ok());
  v1::ListJobsRequest other;
  other.add_states(v1::SUCCEEDED);
  other.set_page_token(page.next_page_token());
  grpc::Status st = List(other, &page);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("page_token: it was made for another filter"));
  other.Clear();
  other.set_page_token("not-a-token");
  EXPECT_EQ(List(other, &page).error_code(), StatusCode::INVALID_ARGUMENT);
  other.Clear();
  other.set_page_size(-1);
  EXPECT_EQ(List(other, &page).error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(ListingsTest, DeleteJobRemovesAFinishedJobsRowHistoryAndFilesButNotItsModel) {
  v1::JobSpec spec = BlobsSpec(1);
  spec.mutable_checkpoint()->set_every_steps(5);
  const v1::Job trained = Submit(spec);
  Stream(trained.id());
  ASSERT_EQ(Get(trained.id()).state(), v1::SUCCEEDED);
  const fs::path dir = root_ / "data" / "jobs" / trained.id();
  ASSERT_TRUE(fs::exists(dir / "model.anvil"));
  ASSERT_TRUE(fs::exists(dir / "checkpoint.safetensors"));
  // A job still running is refused; unknown ids are NOT_FOUND.
  const v1::Job running = Submit(BlobsSpec(100000));
  ASSERT_TRUE(WaitUntil([&] { return Get(running.id()).state() == v1::RUNNING; }));
  grpc::Status st = Delete(running.id());
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("cancel it first"));
  EXPECT_EQ(Delete("job-000000000000").error_code(), StatusCode::NOT_FOUND);

  ASSERT_TRUE(Delete(trained.id()).ok());
  grpc::ClientContext ctx;
  v1::GetJobRequest get;
  get.set_job_id(trained.id());
  v1::Job job;
  EXPECT_EQ(training_->GetJob(&ctx, get, &job).error_code(), StatusCode::NOT_FOUND);
  grpc::Status streamed;
  Stream(trained.id(), 0, &streamed);
  EXPECT_EQ(streamed.error_code(), StatusCode::NOT_FOUND);
  EXPECT_FALSE(fs::exists(dir / "checkpoint.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.anvil"));
  v1::PredictResponse resp;
  EXPECT_TRUE(Predict(PredictOf("blobs-mlp", randn({2, 2})), &resp).ok());
  // The model survives a restart too (its archive was kept).
  grpc::ClientContext cancel_ctx;
  v1::CancelJobRequest cancel;
  cancel.set_job_id(running.id());
  training_->CancelJob(&cancel_ctx, cancel, &job);
  Stop();
  Start();
  EXPECT_TRUE(Predict(PredictOf("blobs-mlp", randn({2, 2})), &resp).ok());
  EXPECT_EQ(AllIds(), std::vector<std::string>({running.id()}));
}

TEST_F(ListingsTest, FinishedJobsBeyondTheRetentionAreDeleted) {
  Stop();
  ServerOptions o;
  o.max_finished_jobs = 3;
  Start(o);
  std::vector<std::string> made;
  for (int i = 0; i < 5; ++i) made.push_back(FailFast("r" + std::to_string(i)).id());
  // The sweep runs once a job's end is recorded, after its stream has seen the end.
  const std::vector<std::string> newest{made[4], made[3], made[2]};
  EXPECT_TRUE(WaitUntil([&] { return AllIds() == newest; })) << AllIds().size();
  EXPECT_FALSE(fs::exists(root_ / "data" / "jobs" / made[0]));
  // An age limit applies at start as well: everything finished is older than a millisecond.
  Stop();
  o.max_finished_jobs = 0;
  o.job_retention = std::chrono::milliseconds(1);
  Start(o);
  EXPECT_TRUE(AllIds().empty());
}

TEST_F(ListingsTest, ModelsArePagedByNameThenVersion) {
  Stream(Submit(BlobsSpec(1)).id());
  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  const std::string file = Export("blobs-mlp", v1::ONNX, &st, &sha, &total);
  ASSERT_TRUE(st.ok());
  v1::Model model;
  for (const char* name : {"a", "a", "b"}) ASSERT_TRUE(RegisterModel(name, file, &model).ok());
  std::vector<std::string> seen;
  v1::ListModelsRequest req;
  req.set_page_size(3);
  std::vector<int> sizes;
  while (true) {
    grpc::ClientContext ctx;
    v1::ListModelsResponse page;
    ASSERT_TRUE(serving_->ListModels(&ctx, req, &page).ok());
    sizes.push_back(page.models_size());
    for (const v1::Model& m : page.models()) seen.push_back(m.name() + ":" + std::to_string(m.version()));
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(sizes, std::vector<int>({3, 1}));
  EXPECT_EQ(seen, std::vector<std::string>({"a:1", "a:2", "b:1", "blobs-mlp:1"}));
}

}  // namespace
}  // namespace anvil::server
