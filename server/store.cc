// What every store engine shares: job state names and the choice of engine.
#include "server/store.h"

#include <array>

#include "server/store_postgres.h"
#include "server/store_sqlite.h"

namespace anvil::server {
namespace {

constexpr std::array<std::string_view, 6> kStateNames = {"QUEUED", "RUNNING",   "SUCCEEDED",
                                                         "FAILED", "CANCELLED", "INTERRUPTED"};

}  // namespace

std::string_view job_state_name(JobState state) {
  const auto i = static_cast<size_t>(state);
  ANVIL_CHECK(i < kStateNames.size(), "job_state_name: expected a JobState, got the value ", i);
  return kStateNames[i];
}

JobState parse_job_state(std::string_view name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (kStateNames[i] == name) return static_cast<JobState>(i);
  }
  throw Error(detail::StrCat("unknown job state '", name,
                             "': expected one of QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, INTERRUPTED"));
}

bool is_terminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed || state == JobState::kCancelled;
}

namespace {
[[noreturn]] void NoParts(const Store& store) {
  throw StoreError(detail::StrCat("job store: data-parallel jobs spanning replicas need the PostgreSQL store that ",
                                  "the replicas share; this one is ", store.engine(), " (", store.path(), ")"));
}
}  // namespace

bool Store::open_parts(const std::string&, int64_t, int, int, int, const std::string&) { NoParts(*this); }
std::optional<JobPart> Store::claim_part(const std::string&, int64_t, int) { NoParts(*this); }
std::vector<JobPart> Store::renew_parts(const std::string&, const std::vector<JobPart>&, int64_t) { NoParts(*this); }
void Store::finish_part(const std::string&, const JobPart&, bool, const std::string&) { NoParts(*this); }
std::vector<JobPart> Store::parts(const std::string&, int64_t) const { NoParts(*this); }
void Store::remove_parts(const std::string&) {}  // nothing was opened

bool is_postgres_location(std::string_view location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
}

std::unique_ptr<Store> open_store(const std::string& location, const StoreOptions& options) {
  if (is_postgres_location(location)) {
    PostgresStore::Options o;
    o.io_timeout_ms = options.postgres_io_timeout_ms;
    o.connect_timeout_s = options.postgres_connect_timeout_s;
    return std::make_unique<PostgresStore>(location, o);
  }
  return std::make_unique<SqliteStore>(location, options.sqlite_max_pages);
}

}  // namespace anvil::server
