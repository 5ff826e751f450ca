// The store's embedded engine: one SQLite database file (the data dir's anvil.db), the default.
//
// Durability: WAL journal with synchronous=NORMAL, so a committed write survives a process
// crash, and after a power loss the database is consistent but may miss the last
// transactions. Every operation that runs more than one statement runs in one
// BEGIN IMMEDIATE transaction, so it is atomic even against another process using the file.
//
// Thread-safety: one connection, every method serialised on one mutex; any number of threads
// may share a SqliteStore.
#pragma once

#include <memory>
#include <string>

#include "server/store.h"

namespace anvil::server {

class SqliteStore final : public Store {
 public:
  // Opens `db_path`, creating the file and the schema when missing, migrating an older schema.
  // Refuses a database whose schema is newer than kSchemaVersion (written by a newer Anvil) or
  // that is not an Anvil store. `max_pages` > 0 caps the database's size in pages (SQLite's
  // max_page_count): a write beyond it fails as a full disk does.
  explicit SqliteStore(const std::string& db_path, int64_t max_pages = 0);
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  std::pair<JobRow, bool> insert_job(JobRow row) override;
  std::optional<JobRow> get_job(const std::string& id) const override;
  std::optional<JobRow> get_job_by_client_id(const std::string& client_job_id) const override;
  std::map<JobState, int64_t> count_jobs_by_state() const override;
  std::vector<JobRow> list_jobs(const std::vector<JobState>& states = {}, int64_t limit = 0,
                                int64_t before_seq = 0) const override;
  std::vector<std::string> expired_jobs(int64_t keep, int64_t finished_before_ms) const override;
  bool delete_job(const std::string& id) override;
  std::vector<JobRow> jobs_in_states(const std::vector<JobState>& states) const override;
  bool update_job(const JobRow& row, int64_t fence_epoch = 0) override;
  int64_t append_metric(MetricRow row, int64_t fence_epoch = 0) override;
  std::vector<MetricRow> metrics(const std::string& job_id, int64_t from_step, int64_t after_seq = 0,
                                 int64_t limit = 0) const override;
  std::vector<MetricRow> metrics_of_kind(const std::string& job_id, const std::string& kind) const override;
  void truncate_metrics_after(const std::string& job_id, int64_t step) override;
  ModelRow register_model(ModelRow row) override;
  std::optional<ModelRow> get_model(const std::string& name, int64_t version) const override;
  std::vector<ModelRow> list_models(const std::string& name = "", int64_t limit = 0, const std::string& after_name = "",
                                    int64_t after_version = 0) const override;
  std::vector<ModelRow> recent_models(int64_t limit) const override;
  std::optional<JobRow> claim_job(const std::string& owner, int64_t lease_ms,
                                  const std::function<bool(const JobRow&)>& fits) override;
  LeaseRenewal renew_leases(const std::string& owner, const std::vector<std::pair<std::string, int64_t>>& held,
                            int64_t lease_ms) override;
  std::vector<JobRow> lapsed_leases(int64_t grace_ms) const override;
  bool update_job_fenced(const JobRow& row, int64_t epoch) override;
  bool request_cancel(const std::string& id) override;
  std::vector<ClaimRow> claims(const std::string& job_id = "") const override;
  std::unique_ptr<StoreWatch> watch(std::function<void(std::string_view)>) override { return nullptr; }
  const std::string& path() const override;
  std::string_view engine() const override { return "sqlite"; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::server
