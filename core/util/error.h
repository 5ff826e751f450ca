// Engine errors. User errors (bad shapes, dtypes, indices) throw anvil::Error subclasses
// whose message states what was expected and what came; internal invariants use
// ANVIL_INTERNAL_ASSERT, whose failure means a bug in Anvil, not in the caller.
// Thread-safe: these are plain exceptions.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace anvil {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// An index out of range (PyTorch's IndexError).
class IndexError : public Error {
 public:
  using Error::Error;
};
// An argument of the wrong dtype or kind (PyTorch's TypeError).
class TypeError : public Error {
 public:
  using Error::Error;
};
// An operation that this device or dtype does not implement.
class NotImplementedError : public Error {
 public:
  using Error::Error;
};
// Allocation failed; the message says how much was asked for and what was in use.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};
// A broken invariant inside Anvil (ANVIL_INTERNAL_ASSERT): a bug here, never the caller's
// fault. The service answers it with INTERNAL, where the other errors are the caller's
// (INVALID_ARGUMENT and friends). The message says where (file:line and the condition).
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void ThrowInternal(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace anvil

// Throws `type` with the concatenated message when `cond` is false.
#define ANVIL_CHECK_T(type, cond, ...)                  \
  do {                                                  \
    if (!(cond)) [[unlikely]] {                         \
      throw type(::anvil::detail::StrCat(__VA_ARGS__)); \
    }                                                   \
  } while (0)
#define ANVIL_CHECK(cond, ...) ANVIL_CHECK_T(::anvil::Error, cond, __VA_ARGS__)
#define ANVIL_CHECK_INDEX(cond, ...) ANVIL_CHECK_T(::anvil::IndexError, cond, __VA_ARGS__)
#define ANVIL_CHECK_TYPE(cond, ...) ANVIL_CHECK_T(::anvil::TypeError, cond, __VA_ARGS__)
#define ANVIL_INTERNAL_ASSERT(cond, ...)                                                      \
  do {                                                                                        \
    if (!(cond)) [[unlikely]] {                                                               \
      ::anvil::detail::ThrowInternal(__FILE__, __LINE__, #cond,                               \
                                     ::anvil::detail::StrCat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                         \
  } while (0)
