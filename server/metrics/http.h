// The metrics address: an HTTP server (civetweb) serving `/metrics` in the Prometheus text
// format from a Registry.
#pragma once

#include <string>

#include "server/metrics/registry.h"

struct mg_context;

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

 private:
  Registry& registry_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace anvil::server::metrics
