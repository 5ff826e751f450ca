// The server's errors are absl::Status values (workers/status.h): the scheduler, the model
// registry, the batcher and the workers return absl::Status / absl::StatusOr across their
// boundaries, and each RPC handler converts once, at the edge, with to_grpc() (through
// guarded()), which also scrubs the server's directories from the message and cuts it.
//
// Code deep inside request parsing and validation may throw ServiceError (it carries its
// status) rather than thread a status through every helper; status_of() turns whatever a body
// threw into its status: a ServiceError keeps its status, a StoreError (the database failed)
// is RESOURCE_EXHAUSTED for a full disk, UNAVAILABLE for an I/O error, else INTERNAL; engine
// exceptions map as workers::engine_exception_status says. Messages must not contain absolute
// server paths (see relative_to_root).
#pragma once

#include <grpcpp/support/status.h>

#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/error.h"
#include "workers/status.h"

namespace anvil::server {

class ServiceError : public std::exception {
 public:
  explicit ServiceError(absl::Status status) : status_(std::move(status)) {}
  ServiceError(absl::StatusCode code, const std::string& message) : status_(code, message) {}
  const absl::Status& status() const { return status_; }
  absl::StatusCode code() const { return status_.code(); }
  const char* what() const noexcept override { return status_.message().data(); }

 private:
  absl::Status status_;  // its message is a std::string: what() is NUL-terminated
};

// Throws ServiceError(code, StrCat(parts...)) when `cond` is false.
#define ANVIL_SERVICE_CHECK(cond, code, ...)                                           \
  do {                                                                                 \
    if (!(cond)) [[unlikely]] {                                                        \
      throw ::anvil::server::ServiceError(code, ::anvil::detail::StrCat(__VA_ARGS__)); \
    }                                                                                  \
  } while (0)

// The value of `result`, or throws ServiceError with its status: for handler bodies, which
// throw their validation errors.
template <typename T>
T value_or_throw(absl::StatusOr<T> result) {
  if (!result.ok()) throw ServiceError(std::move(result).status());
  return std::move(result).value();
}
inline void throw_if_error(absl::Status status) {
  if (!status.ok()) throw ServiceError(std::move(status));
}

// The status for the exception being handled (call inside a catch block only). `engine_code`
// is the code for an anvil::Error (the engine rejecting the request's content).
absl::Status current_exception_status(absl::StatusCode engine_code = absl::StatusCode::kInvalidArgument);

// Runs `body` (returning void, a value, an absl::Status or an absl::StatusOr) and returns its
// result as an absl::Status / absl::StatusOr, or the status of what it threw.
template <typename F>
auto status_of(F&& body) {
  return workers::catch_to_status(std::forward<F>(body), [] { return current_exception_status(); });
}

// The one conversion to the wire: gRPC's codes are absl::StatusCode's, number for number. The
// message is scrubbed of the server's directories (`roots`) and cut to kMaxStatusMessageBytes.
grpc::Status to_grpc(const absl::Status& status, const std::vector<std::string>& roots = {});

// "OK", "INVALID_ARGUMENT", ...: a status code as Prometheus labels and logs spell it.
std::string status_code_name(absl::StatusCode code);
std::string grpc_code_name(grpc::StatusCode code);

// `message` with every occurrence of `root` (an absolute directory) replaced by "<data>".
std::string scrub_paths(std::string message, const std::string& root);

// `value` as an error message may echo it: at most `max` bytes (cut on a UTF-8 boundary, "…"
// marking the cut), so a client's 1 MiB name cannot turn NOT_FOUND into a failure to send the
// status itself (gRPC's metadata limit).
std::string echo(std::string_view value, size_t max = 128);

// The longest status message an RPC returns; longer ones are cut (see echo).
inline constexpr size_t kMaxStatusMessageBytes = 2048;
// A job's stored reason (why it failed or was cancelled): cut like a status message.
inline constexpr size_t kMaxReasonBytes = 2048;

// Runs an RPC body (void or absl::Status): OK when it succeeds, else its status or that of
// what it threw, converted by to_grpc. Every RPC handler goes through this.
template <typename F>
grpc::Status guarded(const std::vector<std::string>& roots, F&& body) {
  return to_grpc(status_of(std::forward<F>(body)), roots);
}

}  // namespace anvil::server
