#include "client/exit_codes.h"

#include <absl/status/status.h>

#include <string>

namespace anvil::client {

ExitCode exit_code_for(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return kExitBadInput;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return kExitRefused;
    default:
      return kExitFailed;
  }
}

std::string status_code_name(grpc::StatusCode code) {
  // gRPC's codes are absl::StatusCode's, number for number; Abseil names them.
  const std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "CODE_" + std::to_string(static_cast<int>(code)) : name;
}

const char* exit_code_table() {
  return "Exit codes:\n"
         "  0  success\n"
         "  1  failed (INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED, ABORTED, CANCELLED)\n"
         "  2  bad input: usage, spec, input file, flag value (INVALID_ARGUMENT, OUT_OF_RANGE)\n"
         "  3  the watched job ended FAILED or CANCELLED\n"
         "  4  not found: job, model, version or token (NOT_FOUND)\n"
         "  5  unavailable: unreachable or no answer in time (UNAVAILABLE, DEADLINE_EXCEEDED)\n"
         "  6  the exported file's size or SHA-256 does not match the server's\n"
         "  7  refused (PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, ALREADY_EXISTS,\n"
         "     RESOURCE_EXHAUSTED)\n";
}

}  // namespace anvil::client
