#include "client/commands/context.h"

#include <google/protobuf/util/json_util.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "client/exit_codes.h"
#include "client/target.h"

namespace anvil::client {
namespace {

std::string ReadFileOrFail(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) {
    throw Failure(kExitBadInput, std::string(flag) + ": cannot read \"" + path + "\": " + std::strerror(errno));
  }
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

void Context::connect() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty() || !tls_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!tls_ca.empty()) ssl.pem_root_certs = ReadFileOrFail(tls_ca, "--tls-ca");
    if (!tls_cert.empty()) {
      ssl.pem_cert_chain = ReadFileOrFail(tls_cert, "--tls-cert");
      ssl.pem_private_key = ReadFileOrFail(tls_key, "--tls-key");
    }
    creds = grpc::SslCredentials(ssl);
  }
  const Target target = grpc_target(server);
  if (!tls_server_name.empty()) {
    args.SetSslTargetNameOverride(tls_server_name);
  } else if ((!tls_ca.empty() || !tls_cert.empty()) && target.uri.rfind("ipv", 0) == 0) {
    args.SetSslTargetNameOverride(target.first_host);  // a resolved list: the certificate names the host
  }
  args.SetServiceConfigJSON(client_service_config());
  channel = grpc::CreateCustomChannel(target.uri, creds, args);
  training = v1::Training::NewStub(channel);
  serving = v1::Serving::NewStub(channel);
}

std::unique_ptr<grpc::ClientContext> Context::call(double seconds) const {
  auto c = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) c->AddMetadata("authorization", "Bearer " + token);
  if (seconds > 0)
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000)));
  return c;
}

void check(const grpc::Status& s, const std::string& what) {
  if (!s.ok()) {
    throw Failure(exit_code_for(s.error_code()),
                  what + ": " + s.error_message() + " (" + status_code_name(s.error_code()) + ")");
  }
}

std::string to_json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace anvil::client
