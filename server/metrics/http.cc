#include "server/metrics/http.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/util/error.h"

namespace anvil::server::metrics {
namespace {

int ServeMetrics(mg_connection* conn, void* data) {
  const std::string body = static_cast<HttpEndpoint*>(data)->registry().render();
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace

HttpEndpoint::HttpEndpoint(Registry& registry, const std::string& address) : registry_(registry) {
  // civetweb takes "host:port"; "127.0.0.1:0" lets the system choose the port.
  const char* options[] = {"listening_ports", address.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  ctx_ = mg_start(&callbacks, this, options);
  ANVIL_CHECK(ctx_ != nullptr, "metrics: cannot listen on ", address, " (in use, or not host:port)");
  mg_set_request_handler(ctx_, "/metrics", ServeMetrics, this);
  mg_server_port ports[1];
  if (mg_get_server_ports(ctx_, 1, ports) == 1) port_ = ports[0].port;
}

HttpEndpoint::~HttpEndpoint() {
  if (ctx_ == nullptr) return;
  // civetweb's listener sees the stop flag only when its poll (2 s timeout) returns: stop on
  // another thread and wake the poll with connections until the stop is done (10 ms, not 2 s).
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    mg_stop(ctx_);
    done = true;
  });
  while (!done.load()) {
    if (port_ > 0) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
}

}  // namespace anvil::server::metrics
