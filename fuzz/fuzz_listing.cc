// ListJobs and ListModels requests from the wire, as the services take them: the wire check,
// protobuf's parse, then the page itself from a store of 40 jobs and 12 model versions (state
// filters, page sizes, the page token's decoding and the keyset queries). A token the fuzzer
// got back from a page is fed to the next call, so deep pages are reached too. Errors are
// ServiceErrors; anything else is a finding.
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "server/listings.h"
#include "server/status.h"
#include "server/store_sqlite.h"
#include "server/wire_check.h"

namespace {

anvil::server::Store& TheStore() {
  static std::unique_ptr<anvil::server::Store> store = [] {
    const std::string dir =
        std::filesystem::temp_directory_path() / ("anvil-fuzz-listing-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto s = std::make_unique<anvil::server::SqliteStore>(dir + "/anvil.db");
    const anvil::server::JobState states[] = {anvil::server::JobState::kQueued, anvil::server::JobState::kRunning,
                                              anvil::server::JobState::kSucceeded, anvil::server::JobState::kFailed,
                                              anvil::server::JobState::kCancelled};
    for (int i = 0; i < 40; ++i) {
      anvil::server::JobRow r;
      r.name = "job" + std::to_string(i);
      r.spec_json = R"({"name":"job)" + std::to_string(i) + R"(","epochs":"1"})";
      r.state = states[i % 5];
      r.device = "cpu";
      s->insert_job(r);
    }
    for (int i = 0; i < 12; ++i) {
      anvil::server::ModelRow m;
      m.name = std::string(1, static_cast<char>('a' + i % 3));
      m.path = "models/" + m.name;
      m.signature_json = "{}";
      s->register_model(m);
    }
    return s;
  }();
  return *store;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool jobs = (data[0] & 1) == 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const anvil::server::WireBounds bounds;
  try {
    if (jobs) {
      anvil::server::check_wire(*anvil::v1::ListJobsRequest::descriptor(), bytes, bounds);
      anvil::v1::ListJobsRequest req;
      if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
      anvil::v1::ListJobsResponse page = anvil::server::list_jobs_page(TheStore(), req);
      if (!page.next_page_token().empty()) {
        req.set_page_token(page.next_page_token());
        (void)anvil::server::list_jobs_page(TheStore(), req);
      }
    } else {
      anvil::server::check_wire(*anvil::v1::ListModelsRequest::descriptor(), bytes, bounds);
      anvil::v1::ListModelsRequest req;
      if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
      const anvil::server::ModelPage page = anvil::server::list_models_page(TheStore(), req);
      if (!page.next_page_token.empty()) {
        req.set_page_token(page.next_page_token);
        (void)anvil::server::list_models_page(TheStore(), req);
      }
    }
  } catch (const anvil::server::ServiceError&) {
  }
  return 0;
}
