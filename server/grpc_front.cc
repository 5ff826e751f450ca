#include "server/grpc_front.h"

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/util/error.h"
#include "server/health_service.h"
#include "server/log.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;

// Removes the reflection plugin from one builder (linking it registers it for every builder).
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const auto& p) { return p->name() == "proto_server_reflection"; }),
                   plugins->end());
  }
};

std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

}  // namespace

GrpcFront::GrpcFront(GrpcFrontOptions options, ServiceFactory services)
    : options_(std::move(options)),
      make_services_(std::move(services)),
      // The server's health as a whole ("") and for each named service (server/health_service.h).
      health_(std::make_shared<HealthState>(
          std::vector<std::string>{"anvil.v1.Training", "anvil.v1.Serving", "inference.GRPCInferenceService"})) {
  proc_fds_ = ::opendir("/proc/self/fd");
  tcp_tables_[0] = ::open("/proc/self/net/tcp", O_RDONLY | O_CLOEXEC);
  tcp_tables_[1] = ::open("/proc/self/net/tcp6", O_RDONLY | O_CLOEXEC);
}

GrpcFront::~GrpcFront() {
  shutdown(std::chrono::seconds(1));
  if (proc_fds_ != nullptr) ::closedir(proc_fds_);
  for (int fd : tcp_tables_) {
    if (fd >= 0) ::close(fd);
  }
}

std::unique_ptr<grpc::Server> GrpcFront::Build(const std::string& address, int* port) {
  grpc::EnableDefaultHealthCheckService(false);  // anvild's own (server/health_service.h)
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Reflection hands out the whole schema to anyone who asks: only on request.
  if (!options_.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  // No SO_REUSEPORT: with it gRPC opens one listener per poller, and for port 0 each of them
  // binds its own ephemeral port (a second, unlogged port serving the whole API); it would
  // also let another process bind the same port and take a share of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, options_.credentials ? options_.credentials : grpc::InsecureServerCredentials(),
                           port);
  // gRPC has one receive limit per server: the larger of the services' limits, plus a margin
  // so that a message just over a service's own limit reaches that service's check, which names
  // the limit and its flag (server/unary_call.h); only far larger ones get gRPC's own refusal.
  const RequestLimits& limits = options_.limits;
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<int64_t>(std::max(limits.predict_message_bytes, limits.training_message_bytes) + (1 << 20), INT32_MAX)));
  builder.SetMaxSendMessageSize(static_cast<int>(std::max<int64_t>(limits.predict_message_bytes, 4 << 20)));
  std::vector<std::unique_ptr<grpc::Service>> services = make_services_();
  services.push_back(make_health_service(health_));
  for (auto& s : services) builder.RegisterService(s.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server != nullptr) {
    for (auto& s : services_) retired_services_.push_back(std::move(s));
    services_ = std::move(services);
  }
  return server;
}

void GrpcFront::start() {
  MutexLock lock(&mu_);
  server_ = Build(options_.address, &port_);
  ANVIL_CHECK(server_ != nullptr && port_ > 0, "anvild: cannot listen on ", options_.address,
              " (in use, or not a valid address)");
  watchdog_ = std::thread([this] { Watch(); });
}

void GrpcFront::set_health(bool serving) {
  MutexLock lock(&mu_);
  serving_ = serving;
  health_->set_serving(serving);
}

void GrpcFront::shutdown(std::chrono::milliseconds grace) {
  std::unique_ptr<grpc::Server> server;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    server = std::move(server_);
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  const auto deadline = std::chrono::system_clock::now() + grace;
  if (server) server->Shutdown(deadline);
  MutexLock lock(&mu_);
  for (auto& old : retired_servers_) old->Shutdown(deadline);
  if (options_.quiesce) options_.quiesce();
  server.reset();
  retired_servers_.clear();
  services_.clear();
  retired_services_.clear();
}

void GrpcFront::wait() {
  UniqueMutexLock lock(&mu_);
  while (!stopped_) cv_.wait(lock.native());
}

int64_t GrpcFront::AcceptQueueLength() const {
  // The sockets this process owns (by inode), then their rows in the TCP tables: for a
  // listening socket (state 0A) the rx_queue column is the accept queue's length.
  // No new fd is opened here: the fd table may be full.
  if (proc_fds_ == nullptr) return -1;
  std::set<std::string> inodes;
  ::rewinddir(proc_fds_);
  char target[64];
  while (const dirent* e = ::readdir(proc_fds_)) {
    const ssize_t n = ::readlinkat(::dirfd(proc_fds_), e->d_name, target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
  }
  for (int fd : tcp_tables_) {
    if (fd < 0) continue;
    std::string text;
    char buf[16384];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd, buf, sizeof(buf), at);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      at += n;
    }
    std::istringstream in(text);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;
      if (std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16) != port_) continue;
      return std::stoll(queues.substr(queues.find(':') + 1), nullptr, 16);
    }
  }
  return -1;
}

void GrpcFront::Watch() {
  int stuck = 0;
  UniqueMutexLock lock(&mu_);
  while (true) {
    // A probe interval, or until the front stops.
    const auto until = std::chrono::steady_clock::now() + options_.probe_interval;
    bool timed_out = false;
    while (!stopped_ && !timed_out) timed_out = cv_.wait_until(lock.native(), until) == std::cv_status::timeout;
    if (stopped_) break;
    if (server_ == nullptr) {
      // A rebuild that could not bind (fds still exhausted): try again.
    } else {
      lock.unlock();
      const int64_t queued = AcceptQueueLength();
      lock.lock();
      stuck = queued > 0 ? stuck + 1 : 0;
      if (stuck < options_.stuck_probes || stopped_) continue;
      log(LogLevel::kError, "the gRPC listener on port ", port_, " stopped accepting (", queued,
          " connections waiting; gRPC 1.51 after an accept4() failure such as EMFILE): restarting it");
      std::unique_ptr<grpc::Server> stuck_server = std::move(server_);
      lock.unlock();  // the shutdown waits up to its deadline for running calls
      stuck_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      lock.lock();
      retired_servers_.push_back(std::move(stuck_server));
      if (stopped_) break;
    }
    stuck = 0;
    int port = 0;
    server_ = Build(HostOf(options_.address) + ":" + std::to_string(port_), &port);
    if (server_ == nullptr || port != port_) {
      server_.reset();
      log(LogLevel::kError, "cannot listen on port ", port_, " again yet; retrying");
      continue;
    }
    ++rebuilds_;
    log(LogLevel::kInfo, "gRPC listener on port ", port_, " accepting again");
  }
}

}  // namespace anvil::server
