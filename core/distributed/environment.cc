// Reading a rank's environment and making its rendezvous store: see environment.h.
#include "core/distributed/environment.h"

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "core/distributed/gloo_process_group.h"
#ifdef ANVIL_WITH_NCCL
#include "core/distributed/nccl_process_group.h"
#endif

namespace anvil::distributed {
namespace {

const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int64_t IntVar(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = Get(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  ANVIL_CHECK(end != v && *end == '\0' && x >= lo && x <= hi, name, ": expected an integer in [", lo, ", ", hi,
              "], got '", v, "'");
  return x;
}

std::string Interfaces() {
  std::set<std::string> names;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) names.insert(a->ifa_name);
    freeifaddrs(list);
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A PrefixStore that owns the store it prefixes (Gloo's holds a reference only).
class OwningPrefixStore final : public gloo::rendezvous::Store {
 public:
  OwningPrefixStore(const std::string& prefix, std::unique_ptr<gloo::rendezvous::Store> base)
      : base_(std::move(base)), prefixed_(prefix, *base_) {}
  void set(const std::string& key, const std::vector<char>& data) override { prefixed_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return prefixed_.get(key); }
  void wait(const std::vector<std::string>& keys) override { prefixed_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    prefixed_.wait(keys, timeout);
  }

 private:
  std::unique_ptr<gloo::rendezvous::Store> base_;
  gloo::rendezvous::PrefixStore prefixed_;
};

}  // namespace

bool RankEnvironment::present() { return Get("ANVIL_WORLD_SIZE") != nullptr; }

RankEnvironment RankEnvironment::from_env() {
  RankEnvironment e;
  e.world_size = static_cast<int>(IntVar("ANVIL_WORLD_SIZE", 1, 1, 1 << 16));
  e.rank = static_cast<int>(IntVar("ANVIL_RANK", 0, 0, e.world_size - 1));
  e.local_rank = static_cast<int>(IntVar("ANVIL_LOCAL_RANK", e.rank, 0, e.world_size - 1));
  e.attempt = static_cast<int>(IntVar("ANVIL_RESTART_ATTEMPT", 0, 0, 1 << 20));
  e.timeout = std::chrono::milliseconds(IntVar("ANVIL_COLLECTIVE_TIMEOUT_S", 300, 1, 86400) * 1000);
  e.rendezvous_timeout =
      std::chrono::milliseconds(IntVar("ANVIL_RENDEZVOUS_TIMEOUT_S", e.timeout.count() / 1000, 1, 86400) * 1000);
  if (const char* j = Get("ANVIL_JOB_ID")) e.job_id = j;
  if (const char* b = Get("ANVIL_BACKEND")) e.backend = b;
  ANVIL_CHECK(e.backend == "gloo" || e.backend == "nccl",
              "ANVIL_BACKEND: expected gloo (CPU tensors) or nccl (CUDA "
              "tensors, one device per local rank), got '",
              e.backend, "'");
  const char* family = Get("ANVIL_SOCKET_FAMILY");
  const std::string fam = family != nullptr ? family : "ipv4";
  ANVIL_CHECK(fam == "ipv4" || fam == "ipv6", "ANVIL_SOCKET_FAMILY: expected ipv4 or ipv6, got '", fam, "'");
  e.ipv6 = fam == "ipv6";
  const char* ifname = Get("ANVIL_SOCKET_IFNAME");
  ANVIL_CHECK(ifname != nullptr,
              "ANVIL_SOCKET_IFNAME is not set: name the network interface the ranks reach each other on (lo "
              "when every rank runs on this host; this host has: ",
              Interfaces(),
              "). It is never guessed: the address the hostname resolves to is often 127.0.1.1 or an interface "
              "other hosts cannot reach");
  ANVIL_CHECK(if_nametoindex(ifname) != 0, "ANVIL_SOCKET_IFNAME: no interface '", ifname,
              "' on this host; it has: ", Interfaces());
  e.socket_ifname = ifname;
  if (const char* d = Get("ANVIL_RDZV_DIR")) e.rdzv_dir = d;
  if (const char* u = Get("ANVIL_RDZV_URL")) e.rdzv_url = u;
  if (const char* a = Get("ANVIL_MASTER_ADDR")) e.master_addr = a;
  e.master_port = static_cast<int>(IntVar("ANVIL_MASTER_PORT", 0, 0, 65535));
  ANVIL_CHECK(!e.rdzv_dir.empty() || !e.rdzv_url.empty() || (!e.master_addr.empty() && e.master_port > 0),
              "no rendezvous: set ANVIL_RDZV_DIR (a directory every rank sees: Gloo's file store), "
              "ANVIL_MASTER_ADDR and ANVIL_MASTER_PORT (a Redis server there: Gloo's RedisStore; anvil-run "
              "starts one on the master) or ANVIL_RDZV_URL (a store of a registered scheme)");
  return e;
}

std::string RankEnvironment::prefix() const { return "anvil/" + job_id + "/attempt-" + std::to_string(attempt) + "/"; }

std::string RankEnvironment::describe() const {
  // A URL is named by its scheme only: it may carry a password.
  const std::string where = !rdzv_dir.empty()   ? "file store " + rdzv_dir
                            : !rdzv_url.empty() ? rdzv_url.substr(0, rdzv_url.find(':')) + " store"
                                                : "redis " + master_addr + ":" + std::to_string(master_port);
  return detail::StrCat("rank ", rank, " of ", world_size, " (local ", local_rank, "), ", backend, " over ",
                        socket_ifname, ipv6 ? " (ipv6)" : " (ipv4)", ", rendezvous ", where, " prefix ", prefix());
}

namespace {

// Whether a TCP connection to host:port opens within a second (a refused or unreachable port
// says why).
bool Reachable(const std::string& host, int port, std::string* why) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *why = gai_strerror(rc);
    return false;
  }
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      if (::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        ok = true;
      } else {
        *why = err != 0 ? std::strerror(err) : "no answer within 1 s";
      }
    } else {
      *why = std::strerror(errno);
    }
    ::close(fd);
  }
  freeaddrinfo(res);
  return ok;
}

bool Exists(gloo::rendezvous::Store& store, const std::string& key) {
  try {
    store.wait({key}, std::chrono::milliseconds(1));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

namespace {

std::map<std::string, RendezvousStoreFactory>& Factories() {
  static std::map<std::string, RendezvousStoreFactory> factories;
  return factories;
}

}  // namespace

void register_rendezvous_store(const std::string& scheme, RendezvousStoreFactory factory) {
  Factories()[scheme] = std::move(factory);
}

std::shared_ptr<gloo::rendezvous::Store> make_rendezvous_store(RankEnvironment& env) {
  std::unique_ptr<gloo::rendezvous::Store> base;
  if (!env.rdzv_url.empty()) {
    const std::string scheme = env.rdzv_url.substr(0, env.rdzv_url.find("://"));
    const auto it = Factories().find(scheme);
    ANVIL_CHECK(it != Factories().end() && env.rdzv_url.find("://") != std::string::npos,
                "ANVIL_RDZV_URL: no rendezvous store for the scheme \"", scheme.substr(0, 40),
                "\" in this program (registered: ", Factories().size(), ")");
    base = it->second(env.rdzv_url, env.rendezvous_timeout);
  } else if (!env.rdzv_dir.empty()) {
    std::filesystem::create_directories(env.rdzv_dir);
    base = std::make_unique<gloo::rendezvous::FileStore>(env.rdzv_dir);
  } else {
    // Node 0 may start its store after the other nodes' ranks: retry until the rendezvous
    // timeout.
    const auto deadline = std::chrono::steady_clock::now() + env.rendezvous_timeout;
    // The port is probed first: a RedisStore that fails to connect leaks hiredis's context.
    std::string why;
    while (!Reachable(env.master_addr, env.master_port, &why)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        throw Error(detail::StrCat("rendezvous: cannot reach the Redis store at ", env.master_addr, ":",
                                   env.master_port, " (ANVIL_MASTER_ADDR/ANVIL_MASTER_PORT) within ",
                                   env.rendezvous_timeout.count() / 1000, " s: ", why));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    try {
      base = std::make_unique<gloo::rendezvous::RedisStore>(env.master_addr, env.master_port);
    } catch (const std::exception& e) {
      throw Error(detail::StrCat("rendezvous: the Redis store at ", env.master_addr, ":", env.master_port,
                                 " (ANVIL_MASTER_ADDR/ANVIL_MASTER_PORT): ", e.what()));
    }
  }
  // Attempts per node may drift apart (a node whose ranks failed twice while another's failed
  // once): a rank joins the newest attempt any rank has opened, so the nodes meet again.
  const std::string job = "anvil/" + env.job_id + "/attempt-";
  while (env.attempt < (1 << 20) && Exists(*base, job + std::to_string(env.attempt + 1) + "/opened")) ++env.attempt;
  const std::string opened = job + std::to_string(env.attempt) + "/opened";
  if (!Exists(*base, opened)) {
    try {
      base->set(opened, {'1'});
    } catch (const std::exception&) {
      // Another rank opened it first (Redis keys are set once).
    }
  }
  return std::make_shared<OwningPrefixStore>(env.prefix(), std::move(base));
}

std::shared_ptr<ProcessGroup> init_process_group(RankEnvironment& env) {
  if (env.backend == "nccl") {
#ifdef ANVIL_WITH_NCCL
    ProcessGroupOptions o;
    o.timeout = env.timeout;
    return std::make_shared<NcclProcessGroup>(make_rendezvous_store(env), env.rank, env.world_size, env.local_rank, o);
#else
    throw Error("ANVIL_BACKEND=nccl: this build has no CUDA backend (and so no NCCL); use gloo");
#endif
  }
  GlooOptions o;
  o.timeout = env.timeout;
  o.rendezvous_timeout = env.rendezvous_timeout;
  o.ifname = env.socket_ifname;
  o.ipv6 = env.ipv6;
  return std::make_shared<GlooProcessGroup>(make_rendezvous_store(env), env.rank, env.world_size, o);
}

}  // namespace anvil::distributed
