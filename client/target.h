// Where the CLI connects: one anvild, or several replicas behind one channel.
//
// `--server` takes HOST:PORT, a comma-separated list of them (each replica), or a gRPC target
// URI such as dns:///anvild.example:50051 (a name with several A records). A list is resolved
// here into gRPC's ipv4:/ipv6: target, since gRPC resolves one name per channel. Every channel
// spreads calls with round_robin and checks each address with the standard health protocol
// (a draining replica answers NOT_SERVING and is skipped), and retries UNAVAILABLE on the calls
// that are safe to repeat (reads, Predict, CancelJob), as the Python client does.
#pragma once

#include <string>

namespace anvil::client {

struct Target {
  std::string uri;         // for grpc::CreateCustomChannel
  std::string first_host;  // the first host named (TLS: the name its certificate must carry)
};

// Throws std::runtime_error naming the address that does not parse or resolve.
Target grpc_target(const std::string& servers);

// The channel's service config: round_robin, health checking, the retry policy.
std::string client_service_config();

}  // namespace anvil::client
