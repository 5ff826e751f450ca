#include "server/loopback.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace anvil::server {
namespace {

bool LoopbackIp(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) return true;
    // ::ffff:127.x.y.z, the v4-mapped form of a loopback address.
    return IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

bool is_loopback_address(const std::string& address) {
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0) return true;
  std::string rest = address;
  for (const char* scheme : {"ipv4:", "ipv6:", "dns:"}) {
    if (rest.rfind(scheme, 0) == 0) rest = rest.substr(std::strlen(scheme));
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return false;  // ":port" binds every interface
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool all = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) all = all && LoopbackIp(a->ai_addr);
  ::freeaddrinfo(found);
  return all;
}

}  // namespace anvil::server
