// The metrics address: an HTTP server (cpp-httplib, Debian's libcpp-httplib-dev) serving
// `/metrics` in the Prometheus text format from a Registry, and any pages added (the status
// page). GET and HEAD only; any other method is 405 with `Allow: GET, HEAD`.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/metrics/registry.h"

namespace httplib {
class Server;
}

namespace anvil::server::metrics {

class HttpEndpoint {
 public:
  // Listens on `address` ("127.0.0.1:9464"; port 0 picks a free one). Throws on failure.
  HttpEndpoint(Registry& registry, const std::string& address);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }
  Registry& registry() { return registry_; }

  // Serves GET `path` (exactly) with what `page` returns: {content type, body}.
  using Page = std::function<std::pair<std::string, std::string>()>;
  void add_page(const std::string& path, Page page);

 private:
  Registry& registry_;
  std::mutex pages_mu_;
  std::map<std::string, std::shared_ptr<const Page>> pages_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::atomic<bool> listening_done_{false};
  int port_ = 0;
};

}  // namespace anvil::server::metrics
