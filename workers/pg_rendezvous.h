// Gloo's rendezvous store on PostgreSQL: data-parallel ranks on several anvild replicas meet
// through the job store they already share, with no Redis or other server beside it. The keys
// carry the job and the attempt (environment.h's prefix "anvil/JOB/attempt-N/"), so the ranks
// of a restarted attempt never meet a stale rank of the failed one. Rows live in the table
// `rendezvous` (schema version 5, created by the job store's migrations).
//
// `set` is an upsert; `get` and `wait` poll (5 ms, doubling to 100 ms) until every key is
// there or the timeout passes, then throw gloo::IoException naming the keys still missing. A
// lost connection is reopened on the next call (libpq's URL: sslmode and the rest apply).
//
// Registered for postgresql:// and postgres:// rendezvous URLs (ANVIL_RDZV_URL) by
// register_postgres_rendezvous().
//
// Thread-safety: every call takes the store's mutex (one connection).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/util/mutex.h"

struct pg_conn;

namespace anvil::workers {

class PostgresRendezvousStore final : public gloo::rendezvous::Store {
 public:
  PostgresRendezvousStore(std::string url, std::chrono::milliseconds timeout);
  ~PostgresRendezvousStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Removes the rows under `prefix` ("anvil/JOB/"): a finished job's rendezvous.
  void remove_prefix(const std::string& prefix);

 private:
  // Connects (again) when needed; throws gloo::IoException.
  pg_conn* Connection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keys among `keys` that are not set yet.
  std::vector<std::string> Missing(const std::vector<std::string>& keys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string url_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  pg_conn* conn_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Makes core/distributed's make_rendezvous_store take postgresql:// URLs.
void register_postgres_rendezvous();

}  // namespace anvil::workers
