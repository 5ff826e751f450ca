#include "server/listings.h"

#include <absl/strings/numbers.h>

#include "server/page_token.h"
#include "server/scheduler.h"
#include "server/status.h"

namespace anvil::server {
namespace {

JobState FromWire(v1::JobState s) {
  switch (s) {
    case v1::QUEUED:
      return JobState::kQueued;
    case v1::RUNNING:
      return JobState::kRunning;
    case v1::SUCCEEDED:
      return JobState::kSucceeded;
    case v1::FAILED:
      return JobState::kFailed;
    case v1::CANCELLED:
      return JobState::kCancelled;
    case v1::INTERRUPTED:
      return JobState::kInterrupted;
    default:
      throw ServiceError(absl::StatusCode::kInvalidArgument,
                         "states: unknown job state " + std::to_string(static_cast<int>(s)));
  }
}

}  // namespace

v1::ListJobsResponse list_jobs_page(const Store& store, const v1::ListJobsRequest& req) {
  ANVIL_SERVICE_CHECK(req.states_size() <= 16, absl::StatusCode::kInvalidArgument,
                      "states: expected at most 16 (there are 6 states), got ", req.states_size());
  std::vector<JobState> states;
  std::string filter;  // the page token's: a token is valid only with the states it was made for
  for (int s : req.states()) {
    states.push_back(FromWire(static_cast<v1::JobState>(s)));
    filter += std::to_string(s) + ",";
  }
  // page_size, or an older client's limit (which meant "at most this many").
  const int size =
      req.page_size() != 0 || req.limit() == 0 ? page_size_of(req.page_size()) : page_size_of(req.limit(), "limit");
  int64_t before_seq = 0;
  if (!req.page_token().empty()) {
    const std::string position = read_page_token(req.page_token(), "jobs", filter);
    ANVIL_SERVICE_CHECK(absl::SimpleAtoi(position, &before_seq) && before_seq > 0, absl::StatusCode::kInvalidArgument,
                        "page_token: not a token of this listing");
  }
  std::vector<JobRow> rows = store.list_jobs(states, size + 1, before_seq);
  const bool more = static_cast<int>(rows.size()) > size;
  if (more) rows.pop_back();
  v1::ListJobsResponse resp;
  for (JobRow& row : rows) {
    if (req.view() != v1::JOB_VIEW_FULL) row.spec_json.clear();  // summaries: GetJob has the spec
    *resp.add_jobs() = Scheduler::to_job(row);
  }
  if (more) resp.set_next_page_token(make_page_token("jobs", filter, std::to_string(rows.back().seq)));
  return resp;
}

ModelPage list_models_page(const Store& store, const v1::ListModelsRequest& req) {
  const int size = page_size_of(req.page_size());
  std::string after_name;
  int64_t after_version = 0;
  if (!req.page_token().empty()) {
    const std::string position = read_page_token(req.page_token(), "models", req.name());
    const size_t colon = position.find(':');
    ANVIL_SERVICE_CHECK(colon != std::string::npos && absl::SimpleAtoi(position.substr(0, colon), &after_version),
                        absl::StatusCode::kInvalidArgument, "page_token: not a token of this listing");
    after_name = position.substr(colon + 1);
  }
  ModelPage page;
  page.rows = store.list_models(req.name(), size + 1, after_name, after_version);
  if (static_cast<int>(page.rows.size()) > size) {
    page.rows.pop_back();
    page.next_page_token =
        make_page_token("models", req.name(), std::to_string(page.rows.back().version) + ":" + page.rows.back().name);
  }
  return page;
}

}  // namespace anvil::server
