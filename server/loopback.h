// Whether a listening address reaches this machine only. The insecure default (no TLS, no
// tokens) is allowed on such an address alone, so the decision is made on what the address
// binds to: a literal IP is loopback when it is in 127.0.0.0/8 or is ::1; a name is resolved
// and is loopback only when every address it resolves to is (gRPC binds to each of them).
// "127.example.com" is a name like any other. Unix sockets are local.
// Thread-safe: a pure function (name resolution reads the system's resolver).
#pragma once

#include <string>

namespace anvil::server {

// `address` as gRPC takes it: "host:port", "[v6]:port", "ipv4:a.b.c.d:port",
// "ipv6:[v6]:port", "unix:path", "unix-abstract:name".
bool is_loopback_address(const std::string& address);

}  // namespace anvil::server
