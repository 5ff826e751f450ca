// The service's error vocabulary is absl::Status. The engine (core/) throws; the workers and
// the server return statuses across their boundaries (worker events, serving commands, the
// scheduler and the model registry), and the RPC handlers turn a status into a grpc::Status
// in one place (server/status.h: to_grpc).
//
// This header is the engine's side of that: which status an engine exception means, and the
// propagation macros. The server adds its own exceptions (ServiceError, StoreError) on top.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

namespace anvil::workers {

// The status for the exception being handled (call inside a catch block only):
// anvil::InternalError (a broken invariant: a bug, not the caller's fault) INTERNAL,
// OutOfMemoryError and std::bad_alloc RESOURCE_EXHAUSTED, another anvil::Error `engine_code`
// (the engine rejected the request's content: INVALID_ARGUMENT unless the caller knows
// better), any other exception INTERNAL.
absl::Status engine_exception_status(absl::StatusCode engine_code = absl::StatusCode::kInvalidArgument);

template <typename T>
inline constexpr bool kIsStatusOr = false;
template <typename T>
inline constexpr bool kIsStatusOr<absl::StatusOr<T>> = true;

// Runs `body` and returns what it returned (an absl::Status, an absl::StatusOr<T>, or a plain
// value wrapped as one), or the status of what it threw, mapped by `to_status` (called inside
// the catch block). The place where exceptions become statuses.
template <typename F, typename ToStatus>
auto catch_to_status(F&& body, ToStatus&& to_status) {
  using R = std::invoke_result_t<F>;
  if constexpr (std::is_void_v<R>) {
    try {
      body();
      return absl::OkStatus();
    } catch (...) {
      return absl::Status(to_status());
    }
  } else if constexpr (std::is_same_v<R, absl::Status>) {
    try {
      return body();
    } catch (...) {
      return absl::Status(to_status());
    }
  } else {
    using Result = std::conditional_t<kIsStatusOr<R>, R, absl::StatusOr<R>>;
    try {
      return Result(body());
    } catch (...) {
      return Result(to_status());
    }
  }
}

template <typename F>
auto engine_status_of(F&& body) {
  return catch_to_status(std::forward<F>(body), [] { return engine_exception_status(); });
}

}  // namespace anvil::workers

// Returns the status of `expr` from the enclosing function when it is not OK.
#define ANVIL_RETURN_IF_ERROR(expr)              \
  do {                                           \
    const ::absl::Status anvil_status_ = (expr); \
    if (!anvil_status_.ok()) [[unlikely]] {      \
      return anvil_status_;                      \
    }                                            \
  } while (0)

#define ANVIL_STATUS_CONCAT_INNER(a, b) a##b
#define ANVIL_STATUS_CONCAT(a, b) ANVIL_STATUS_CONCAT_INNER(a, b)
// `lhs = value of expr` (an absl::StatusOr<T>), or returns its status when it is not OK.
#define ANVIL_ASSIGN_OR_RETURN(lhs, expr) \
  ANVIL_ASSIGN_OR_RETURN_IMPL(ANVIL_STATUS_CONCAT(anvil_statusor_, __LINE__), lhs, expr)
#define ANVIL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) [[unlikely]] {                     \
    return std::move(tmp).status();                 \
  }                                                 \
  lhs = std::move(tmp).value()
