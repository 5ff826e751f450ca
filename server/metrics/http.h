// The metrics address: an HTTP server (civetweb) serving `/metrics` in the Prometheus text
// format from a Registry, and any pages added (the status page).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "server/metrics/registry.h"

struct mg_context;
struct mg_connection;

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

  // Serves GET `path` (exactly) with what `page` returns: {content type, body}. Add pages
  // right after construction, before clients know the address.
  using Page = std::function<std::pair<std::string, std::string>()>;
  void add_page(const std::string& path, Page page);

 private:
  static int Dispatch(mg_connection* conn, void* data);
  Registry& registry_;
  std::map<std::string, std::unique_ptr<Page>> pages_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace anvil::server::metrics
