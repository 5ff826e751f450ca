// The store's shared engine: a PostgreSQL database (15 or newer) reached through libpq, which
// several anvild replicas can use at once.
//
// libpq rather than libpqxx: the store needs the wire-level pieces that libpq exposes directly
// (the connection's socket and PQnotifies for LISTEN/NOTIFY, SQLSTATE codes to tell a lost
// connection from a refused write, binary parameters so that text is never cut at a NUL), and
// its statements are few and fixed; libpqxx 6.4 would add a layer over the same calls.
//
// The location is libpq's URI ("postgresql://user[:password]@host[:port]/db?sslmode=require");
// every libpq parameter works, TLS included. Messages name "postgresql://user@host:port/db",
// never the password.
//
// Connections: one, opened at construction. When it is lost (the server restarted, a network
// cut), the operation that finds it lost fails with StoreError kIo (gRPC UNAVAILABLE) and the
// next operation reconnects. A statement whose outcome is unknown is never repeated.
//
// Schema: versioned migrations (the same versions as the SQLite engine) run at construction in
// one transaction under an advisory lock, so replicas starting together migrate once.
//
// Thread-safety: one connection, every method serialised on one mutex; any number of threads
// may share a PostgresStore.
#pragma once

#include <memory>
#include <string>

#include "server/store.h"

namespace anvil::server {

class PostgresStore final : public Store {
 public:
  struct Options {
    int connect_timeout_s = 10;
    // > 0: a connection whose sent data stays unacknowledged this long, or that stays silent
    // through keepalives for about as long, is closed (TCP_USER_TIMEOUT and keepalives), so a
    // call over a cut network fails as kIo instead of waiting minutes for TCP to give up.
    // Replicas set it below their lease.
    int io_timeout_ms = 0;
  };

  // Connects and migrates. Throws StoreError (kIo when the database cannot be reached) or
  // anvil::Error (a newer schema, a database that holds other tables).
  PostgresStore(const std::string& url, Options options);
  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

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
  bool open_parts(const std::string& job_id, int64_t epoch, int attempt, int nnodes, int nproc,
                  const std::string& checkpoint) override;
  std::optional<JobPart> claim_part(const std::string& owner, int64_t lease_ms, int max_nproc) override;
  std::vector<JobPart> renew_parts(const std::string& owner, const std::vector<JobPart>& held,
                                   int64_t lease_ms) override;
  void finish_part(const std::string& owner, const JobPart& part, bool ok, const std::string& reason) override;
  std::vector<JobPart> parts(const std::string& job_id, int64_t grace_ms) const override;
  void remove_parts(const std::string& job_id) override;
  // LISTEN on its own connection (reconnecting after a loss, then "reconnected").
  std::unique_ptr<StoreWatch> watch(std::function<void(std::string_view)> on_change) override;
  const std::string& path() const override;
  std::string_view engine() const override { return "postgresql"; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::server
