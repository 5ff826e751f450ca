// anvil-run: starts a data-parallel program as rank processes, torchrun's shape.
//
//   anvil-run --nproc 4 ./train --epochs 3                      one host, 4 ranks
//   anvil-run --nproc 1 --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 --ifname eth0 ./train
//
// One host: the ranks meet through Gloo's file store in a temporary folder and talk over lo.
// Several hosts: node 0 starts a Redis server at --master (Gloo's RedisStore: an existing
// store, not a protocol of Anvil's) unless --rdzv-dir names a folder every host shares; the
// interface is never guessed (environment.h). A failed rank stops the others; with
// --max-restarts they all start again, the program resuming from its checkpoint. SIGINT and
// SIGTERM are forwarded to the ranks.
//
// Exit status: 0 when every rank exited 0; else the failed rank's code (128 + signal).
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "launcher/supervisor.h"

namespace {

using anvil::launch::LaunchOptions;
using anvil::launch::RankSupervisor;

void Log(const std::string& line) { std::fprintf(stderr, "anvil-run: %s\n", line.c_str()); }

bool CanConnect(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  freeaddrinfo(res);
  return ok;
}

// The rendezvous store of a multi-host run, on node 0: a Redis server bound to the master
// address, no persistence (a store lives as long as the run).
pid_t StartRedis(const std::string& addr, int port) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const std::string p = std::to_string(port);
    ::execlp("redis-server", "redis-server", "--bind", addr.c_str(), "--port", p.c_str(), "--save", "", "--appendonly",
             "no", "--protected-mode", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
    std::fprintf(stderr,
                 "anvil-run: cannot execute redis-server (Debian's redis-server package) for the "
                 "rendezvous store; or give --rdzv-dir a folder every host shares\n");
    ::_exit(127);
  }
  for (int i = 0; i < 250; ++i) {
    if (CanConnect(addr, port)) return pid;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      throw std::runtime_error("the rendezvous store (redis-server at " + addr + ":" + std::to_string(port) + ") " +
                               anvil::launch::describe_exit(status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("the rendezvous store (redis-server at " + addr + ":" + std::to_string(port) +
                           ") did not accept connections within 5 s");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"anvil-run: start a data-parallel program as rank processes (torchrun's shape)"};
  LaunchOptions o;
  std::string master, log_dir;
  app.add_option("--nproc,--nproc-per-node", o.nproc, "ranks on this host")->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", o.nnodes, "hosts")->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", o.node_rank, "this host's index, 0 .. nnodes-1")->check(CLI::NonNegativeNumber);
  app.add_option("--master", master, "ADDR:PORT of the rendezvous store (several hosts; node 0 starts it)");
  app.add_option("--rdzv-dir", o.rdzv_dir,
                 "rendezvous through Gloo's file store in this folder (shared by every host)");
  app.add_option("--ifname", o.ifname, "network interface the ranks talk over (default lo on one host)");
  app.add_option("--socket-family", o.socket_family, "ipv4 or ipv6")->check(CLI::IsMember({"ipv4", "ipv6"}));
  app.add_option("--max-restarts", o.max_restarts, "restarts of all ranks after a failure")->check(CLI::Range(0, 1000));
  app.add_option("--job-id", o.job_id, "rendezvous key prefix (default: job)");
  app.add_option("--log-dir", log_dir, "write rank N's output to DIR/rank-N.log (default: inherited)");
  // The program starts at the first argument that is neither an option nor an option's value
  // (or after "--"); everything from there on is the program's, untouched.
  int split = 1;
  while (split < argc) {
    const std::string a = argv[split];
    if (a == "--") {
      ++split;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    const bool has_value = a.find('=') == std::string::npos && a != "-h" && a != "--help";
    split += has_value ? 2 : 1;
  }
  for (int i = split; i < argc; ++i) o.argv.push_back(argv[i]);
  try {
    app.parse(std::min(split, argc), argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.argv.empty()) {
    Log("no program to run: anvil-run [OPTIONS] PROGRAM [ARGS...]");
    return 2;
  }
  if (o.node_rank >= o.nnodes) {
    Log("--node-rank must be below --nnodes");
    return 2;
  }
  std::filesystem::path temp_rdzv;
  pid_t redis = -1;
  try {
    if (o.nnodes == 1) {
      if (o.ifname.empty()) o.ifname = "lo";
      if (o.rdzv_dir.empty() && master.empty()) {
        char tmpl[] = "/tmp/anvil-rdzv-XXXXXX";
        if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("cannot make a rendezvous folder in /tmp");
        temp_rdzv = tmpl;
        o.rdzv_dir = tmpl;
      }
    } else if (o.ifname.empty()) {
      Log("several hosts: --ifname must name the interface the hosts reach each other on (it is never guessed)");
      return 2;
    }
    if (o.rdzv_dir.empty()) {
      const size_t colon = master.rfind(':');
      if (master.empty() || colon == std::string::npos) {
        Log("several hosts: give --master ADDR:PORT (node 0 starts the rendezvous store there) or --rdzv-dir");
        return 2;
      }
      o.master_addr = master.substr(0, colon);
      if (o.master_addr.size() > 2 && o.master_addr.front() == '[')
        o.master_addr = o.master_addr.substr(1, o.master_addr.size() - 2);
      o.master_port = std::stoi(master.substr(colon + 1));
      if (o.node_rank == 0) redis = StartRedis(o.master_addr, o.master_port);
    }
    if (!log_dir.empty()) {
      std::filesystem::create_directories(log_dir);
      o.log_path = [log_dir](int rank) { return log_dir + "/rank-" + std::to_string(rank) + ".log"; };
    }
    o.log = Log;
    // SIGINT/SIGTERM go to the ranks; a thread waits for them so the supervisor can act.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    RankSupervisor supervisor(o);
    std::thread([&supervisor, set] {
      int sig = 0;
      while (sigwait(&set, &sig) == 0) {
        Log(std::string("forwarding ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " to the ranks");
        supervisor.request_stop();
      }
    }).detach();
    const anvil::launch::LaunchResult r = supervisor.run();
    if (redis > 0) {
      ::kill(redis, SIGTERM);
      ::waitpid(redis, nullptr, 0);
    }
    if (!temp_rdzv.empty()) std::filesystem::remove_all(temp_rdzv);
    if (r.succeeded) {
      if (r.restarts > 0) Log("all ranks finished after " + std::to_string(r.restarts) + " restart(s)");
      return 0;
    }
    Log(r.stopped ? "stopped" : "failed: " + r.reason);
    return r.exit_code != 0 ? r.exit_code : 1;
  } catch (const std::exception& e) {
    if (redis > 0) ::kill(redis, SIGKILL);
    if (!temp_rdzv.empty()) std::filesystem::remove_all(temp_rdzv);
    Log(e.what());
    return 2;
  }
}
