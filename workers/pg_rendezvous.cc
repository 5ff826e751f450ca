// Gloo's rendezvous store on PostgreSQL: see pg_rendezvous.h.
#include "workers/pg_rendezvous.h"

#include <gloo/common/error.h>
#include <libpq-fe.h>

#include <algorithm>
#include <thread>

#include "core/distributed/environment.h"

namespace anvil::workers {
namespace {

struct Result {
  PGresult* r;
  explicit Result(PGresult* result) : r(result) {}
  ~Result() { PQclear(r); }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
};

// The URL without its password, for messages.
std::string Redacted(const std::string& url) {
  const size_t scheme = url.find("://"), at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos) return url;
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon) + ":***" + url.substr(at);
}

}  // namespace

PostgresRendezvousStore::PostgresRendezvousStore(std::string url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout) {
  MutexLock lock(&mu_);
  Connection();
}

PostgresRendezvousStore::~PostgresRendezvousStore() {
  if (conn_ != nullptr) PQfinish(conn_);
}

pg_conn* PostgresRendezvousStore::Connection() {
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) return conn_;
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = PQconnectdb(url_.c_str());
  if (PQstatus(conn_) != CONNECTION_OK) {
    const std::string why = PQerrorMessage(conn_);
    PQfinish(conn_);
    conn_ = nullptr;
    GLOO_THROW_IO_EXCEPTION("rendezvous: cannot connect to ", Redacted(url_), ": ", why);
  }
  return conn_;
}

void PostgresRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  MutexLock lock(&mu_);
  static const char kEmpty = 0;  // libpq sends a null pointer as SQL NULL, not as no bytes
  const char* values[2] = {key.c_str(), data.empty() ? &kEmpty : data.data()};
  const int lengths[2] = {static_cast<int>(key.size()), static_cast<int>(data.size())};
  const int formats[2] = {0, 1};
  Result r(PQexecParams(Connection(),
                        "INSERT INTO rendezvous (key, value, created_ms) VALUES ($1, $2, "
                        "(extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
                        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        2, nullptr, values, lengths, formats, 0));
  if (PQresultStatus(r.r) != PGRES_COMMAND_OK) {
    GLOO_THROW_IO_EXCEPTION("rendezvous: set ", key, ": ", PQerrorMessage(conn_));
  }
}

std::vector<std::string> PostgresRendezvousStore::Missing(const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    const char* values[1] = {key.c_str()};
    Result r(
        PQexecParams(Connection(), "SELECT 1 FROM rendezvous WHERE key = $1", 1, nullptr, values, nullptr, nullptr, 0));
    if (PQresultStatus(r.r) != PGRES_TUPLES_OK) {
      GLOO_THROW_IO_EXCEPTION("rendezvous: look up ", key, ": ", PQerrorMessage(conn_));
    }
    if (PQntuples(r.r) == 0) missing.push_back(key);
  }
  return missing;
}

void PostgresRendezvousStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause(5);
  std::vector<std::string> missing = keys;
  for (;;) {
    std::string failure;
    try {
      MutexLock lock(&mu_);
      missing = Missing(missing);
    } catch (const gloo::IoException& e) {
      // The database away for a moment (a restart): reconnect on the next poll, until the deadline.
      failure = e.what();
      MutexLock lock(&mu_);
      if (conn_ != nullptr) PQfinish(conn_);
      conn_ = nullptr;
    }
    if (missing.empty() && failure.empty()) return;
    if (!failure.empty() && std::chrono::steady_clock::now() >= deadline) throw gloo::IoException(failure);
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string names;
      for (const std::string& k : missing) names += (names.empty() ? "" : ", ") + k;
      GLOO_THROW_IO_EXCEPTION("rendezvous: waited ", timeout.count(), " ms for ", names);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(100));
  }
}

std::vector<char> PostgresRendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  MutexLock lock(&mu_);
  const char* values[1] = {key.c_str()};
  Result r(PQexecParams(Connection(), "SELECT value FROM rendezvous WHERE key = $1", 1, nullptr, values, nullptr,
                        nullptr, 1));
  if (PQresultStatus(r.r) != PGRES_TUPLES_OK || PQntuples(r.r) != 1) {
    GLOO_THROW_IO_EXCEPTION("rendezvous: get ", key, ": ", PQerrorMessage(conn_));
  }
  const char* data = PQgetvalue(r.r, 0, 0);
  return std::vector<char>(data, data + PQgetlength(r.r, 0, 0));
}

void PostgresRendezvousStore::remove_prefix(const std::string& prefix) {
  MutexLock lock(&mu_);
  // LIKE with the prefix's own wildcards escaped.
  std::string pattern;
  for (char c : prefix) {
    if (c == '%' || c == '_' || c == '\\') pattern += '\\';
    pattern += c;
  }
  pattern += '%';
  const char* values[1] = {pattern.c_str()};
  Result r(
      PQexecParams(Connection(), "DELETE FROM rendezvous WHERE key LIKE $1", 1, nullptr, values, nullptr, nullptr, 0));
  if (PQresultStatus(r.r) != PGRES_COMMAND_OK) {
    GLOO_THROW_IO_EXCEPTION("rendezvous: remove ", prefix, ": ", PQerrorMessage(conn_));
  }
}

void register_postgres_rendezvous() {
  auto factory = [](const std::string& url, std::chrono::milliseconds timeout) {
    return std::unique_ptr<gloo::rendezvous::Store>(std::make_unique<PostgresRendezvousStore>(url, timeout));
  };
  distributed::register_rendezvous_store("postgresql", factory);
  distributed::register_rendezvous_store("postgres", factory);
}

}  // namespace anvil::workers
