// The listings' pages (Google AIP-158, server/page_token.h): ListJobs newest first, ListModels
// by name then version, each at most a page, read from the store by key. Separate from the
// services so the fuzz target drives the same code.
// Thread-safe: the store is (server/store.h); nothing else is shared.
#pragma once

#include <string>
#include <vector>

#include "proto/anvil/v1/anvil.pb.h"
#include "server/store.h"

namespace anvil::server {

// A page of jobs: summaries (no spec) unless req.view() is FULL. Throws ServiceError
// (INVALID_ARGUMENT) naming the field for an unknown state, a page size < 0 or a token that is
// not this listing's.
v1::ListJobsResponse list_jobs_page(const Store& store, const v1::ListJobsRequest& req);

struct ModelPage {
  std::vector<ModelRow> rows;
  std::string next_page_token;  // "": the last page
};
// A page of model versions (the service describes each row). Throws like list_jobs_page.
ModelPage list_models_page(const Store& store, const v1::ListModelsRequest& req);

}  // namespace anvil::server
