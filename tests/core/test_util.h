// Helpers shared by the engine tests: small tensor builders and exception capture.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/anvil.h"

namespace anvil::test {

inline Tensor F32(std::vector<float> v, std::optional<IntArray> shape = std::nullopt) { return tensor(v, shape); }
inline Tensor F64(std::vector<double> v, std::optional<IntArray> shape = std::nullopt) { return tensor(v, shape); }
inline Tensor I64(std::vector<int64_t> v, std::optional<IntArray> shape = std::nullopt) { return tensor(v, shape); }
inline Tensor Bool(std::vector<bool> v, std::optional<IntArray> shape = std::nullopt) { return tensor(v, shape); }

// 0, 1, ..., n-1 in `shape`: each value is its own linear index. A root tensor, not a view.
inline Tensor Iota(IntArray shape, ScalarType dt = kFloat32) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return arange(n, dt).reshape(shape).clone();
}

// The elements in row-major (logical) order, as doubles.
inline std::vector<double> Vals(const Tensor& t) { return t.to_vector<double>(); }

// The message of what f throws, or "" when it throws nothing.
inline std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Runs f expecting an exception of type E (a test failure otherwise); returns its message.
template <typename E>
std::string Raises(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type; message: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// Restores the thread count at scope exit.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

}  // namespace anvil::test
