// The CLI's exit codes: one table, by what the caller can do about the failure, so a script
// can branch on the kind without parsing messages. `anvil --help` prints it; README "The
// command line" documents it; tests/server/cli_test.sh checks each row against a live server.
//
//   0  success
//   1  failed: the server or the client hit an error the caller cannot fix by retrying or by
//      changing the input (INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED, ABORTED, CANCELLED)
//   2  bad input: usage, a spec, an input file, a flag's value (INVALID_ARGUMENT,
//      OUT_OF_RANGE, and the client's own checks)
//   3  the watched job ended FAILED or CANCELLED
//   4  not found: no such job, model, version or token (NOT_FOUND)
//   5  unavailable: the server cannot be reached or did not answer in time (UNAVAILABLE,
//      DEADLINE_EXCEEDED); retrying later may work
//   6  the exported file's size or SHA-256 does not match what the server sent
//   7  refused: the request is understood but not allowed now or for this caller
//      (PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, ALREADY_EXISTS,
//      RESOURCE_EXHAUSTED)
#pragma once

#include <grpcpp/support/status.h>

#include <string>

namespace anvil::client {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,
  kExitBadInput = 2,
  kExitJobDidNotSucceed = 3,
  kExitNotFound = 4,
  kExitUnavailable = 5,
  kExitChecksumMismatch = 6,
  kExitRefused = 7,
};

ExitCode exit_code_for(grpc::StatusCode code);

// The code's name as gRPC spells it ("NOT_FOUND"), for error lines.
std::string status_code_name(grpc::StatusCode code);

// The table above, for `anvil --help`.
const char* exit_code_table();

}  // namespace anvil::client
