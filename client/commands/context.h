// What every subcommand of the CLI shares: the global flags, the channel to anvild with its
// stubs, and how a failure becomes an error line and an exit code (client/exit_codes.h).
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "proto/anvil/v1/anvil.grpc.pb.h"

namespace anvil::client {

// Thrown by a subcommand; main prints "anvil: " and the message, and exits with `code`.
class Failure : public std::runtime_error {
 public:
  Failure(int code, const std::string& m) : std::runtime_error(m), code(code) {}
  int code;
};

struct Context {
  // The global flags.
  std::string server = "127.0.0.1:50051";
  bool json = false;  // machine-readable output
  std::string token;  // the bearer token every call carries ("" = none): --token or $ANVIL_TOKEN
  // TLS: the CA that signed the server's certificate; a client certificate for mutual TLS;
  // the name the server's certificate is for, when it differs from the address's host.
  std::string tls_ca, tls_cert, tls_key, tls_server_name;

  // Set by connect(); the token subcommand works on local files and never connects.
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Training::Stub> training;
  std::unique_ptr<v1::Serving::Stub> serving;

  void connect();
  // One call's context: the bearer token, and a deadline `seconds` from now (0: none).
  std::unique_ptr<grpc::ClientContext> call(double seconds = 30) const;
};

// A failed call as one line: what was asked, the server's message and the code's name.
void check(const grpc::Status& s, const std::string& what);

// The --json form of a reply: proto field names, indented.
std::string to_json(const google::protobuf::Message& m);

}  // namespace anvil::client
