#include "client/target.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <stdexcept>
#include <vector>

namespace anvil::client {
namespace {

// HOST:PORT, [V6]:PORT.
std::pair<std::string, std::string> split_host_port(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      throw std::runtime_error("--server: expected [IPV6]:PORT, got '" + address + "'");
    }
    return {address.substr(1, close - 1), address.substr(close + 2)};
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    throw std::runtime_error("--server: expected HOST:PORT, got '" + address + "'");
  }
  return {address.substr(0, colon), address.substr(colon + 1)};
}

}  // namespace

Target grpc_target(const std::string& servers) {
  if (servers.find(',') == std::string::npos) {
    // One address or a target URI (dns:///..., ipv4:..., unix:...): gRPC resolves it.
    const size_t colon = servers.find(':');
    const bool uri = servers.find(":/") != std::string::npos || servers.rfind("ipv4:", 0) == 0 ||
                     servers.rfind("ipv6:", 0) == 0 || servers.rfind("unix:", 0) == 0;
    return {servers, uri || colon == std::string::npos ? "" : split_host_port(servers).first};
  }
  std::vector<std::string> v4, v6;
  std::string first_host;
  size_t start = 0;
  while (start <= servers.size()) {
    const size_t comma = std::min(servers.find(',', start), servers.size());
    const std::string address = servers.substr(start, comma - start);
    start = comma + 1;
    if (address.empty()) continue;
    const auto [host, port] = split_host_port(address);
    if (first_host.empty()) first_host = host;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
      throw std::runtime_error("--server: cannot resolve '" + address + "'");
    }
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      if (a->ai_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof(text));
        v4.push_back(std::string(text) + ":" + port);
      } else if (a->ai_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, text, sizeof(text));
        std::string bracketed = "[";
        bracketed += text;
        bracketed += "]:";
        bracketed += port;
        v6.push_back(std::move(bracketed));
      }
      break;  // one address per name given: the list names the replicas
    }
    freeaddrinfo(found);
  }
  // gRPC's ipv4:/ipv6: schemes take one family each; a mixed list keeps the IPv4 addresses.
  const std::vector<std::string>& chosen = v4.empty() ? v6 : v4;
  if (chosen.empty()) throw std::runtime_error("--server: no address in '" + servers + "'");
  std::string uri = v4.empty() ? "ipv6:" : "ipv4:";
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (i > 0) uri += ',';
    uri += chosen[i];
  }
  return {uri, first_host};
}

std::string client_service_config() {
  return R"({
  "loadBalancingConfig": [{"round_robin": {}}],
  "healthCheckConfig": {"serviceName": ""},
  "methodConfig": [{
    "name": [{"service": "anvil.v1.Training", "method": "GetJob"},
             {"service": "anvil.v1.Training", "method": "ListJobs"},
             {"service": "anvil.v1.Training", "method": "CancelJob"},
             {"service": "anvil.v1.Training", "method": "GetServerInfo"},
             {"service": "anvil.v1.Serving", "method": "Predict"},
             {"service": "anvil.v1.Serving", "method": "ListModels"},
             {"service": "anvil.v1.Serving", "method": "GetModel"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.2s", "maxBackoff": "2s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]}
  }]
})";
}

}  // namespace anvil::client
