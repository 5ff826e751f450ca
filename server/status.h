// Errors that carry their gRPC status code. Service code throws ServiceError where the code
// is known (bad input, unknown model...) and the RPC boundary turns any exception into a
// grpc::Status with current_exception_status(): a ServiceError keeps its code, a StoreError
// (the database failed) is RESOURCE_EXHAUSTED for a full disk, UNAVAILABLE for an I/O error,
// else INTERNAL; an anvil::InternalError (a broken invariant: a bug, not the caller's fault)
// is INTERNAL, an OutOfMemoryError RESOURCE_EXHAUSTED, another anvil::Error from the engine
// INVALID_ARGUMENT (it rejected the request's content), and anything else INTERNAL. Messages must not contain absolute
// server paths (see relative_to_root).
#pragma once

#include <grpcpp/support/status.h>

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/error.h"

namespace anvil::server {

class ServiceError : public std::exception {
 public:
  ServiceError(grpc::StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  grpc::StatusCode code() const { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  grpc::StatusCode code_;
  std::string message_;
};

// Throws ServiceError(code, StrCat(parts...)) when `cond` is false.
#define ANVIL_SERVICE_CHECK(cond, code, ...)                                           \
  do {                                                                                 \
    if (!(cond)) [[unlikely]] {                                                        \
      throw ::anvil::server::ServiceError(code, ::anvil::detail::StrCat(__VA_ARGS__)); \
    }                                                                                  \
  } while (0)

// The status for the exception being handled (call inside a catch block only). `engine_code`
// is the code for an anvil::Error (the engine rejecting the request's content).
grpc::Status current_exception_status(grpc::StatusCode engine_code = grpc::StatusCode::INVALID_ARGUMENT);

// "OK", "INVALID_ARGUMENT", ...: a status code as Prometheus labels and logs spell it.
std::string grpc_code_name(grpc::StatusCode code);

// `message` with every occurrence of `root` (an absolute directory) replaced by "<data>".
std::string scrub_paths(std::string message, const std::string& root);

// `value` as an error message may echo it: at most `max` bytes (cut on a UTF-8 boundary, "…"
// marking the cut), so a client's 1 MiB name cannot turn NOT_FOUND into a failure to send the
// status itself (gRPC's metadata limit).
std::string echo(std::string_view value, size_t max = 128);

// The longest status message an RPC returns; longer ones are cut (see echo).
inline constexpr size_t kMaxStatusMessageBytes = 2048;

// Runs an RPC body: OK when it returns, else the status of what it threw, its message
// scrubbed of the server's directories (`roots`). Every RPC handler goes through this.
template <typename F>
grpc::Status guarded(const std::vector<std::string>& roots, F&& body) {
  try {
    body();
    return grpc::Status::OK;
  } catch (...) {
    const grpc::Status st = current_exception_status(grpc::StatusCode::INVALID_ARGUMENT);
    std::string message = st.error_message();
    for (const std::string& root : roots) message = scrub_paths(std::move(message), root);
    if (message.size() > kMaxStatusMessageBytes) message = echo(message, kMaxStatusMessageBytes);
    return grpc::Status(st.error_code(), message);
  }
}

}  // namespace anvil::server
