// Helpers shared by the ops tests (tests/core/*_ops_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/anvil.h"

namespace anvil::ops_test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

inline std::vector<int64_t> Longs(const Tensor& t) { return t.to_vector<int64_t>(); }
inline std::vector<bool> Bools(const Tensor& t) {
  std::vector<uint8_t> u = t.to(kUInt8).to_vector<uint8_t>();
  return std::vector<bool>(u.begin(), u.end());
}

inline bool Close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol = 1e-6,
                        double atol = 1e-6, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(Close(got[i], want[i], rtol, atol))
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

// Naive matrix product in double of a [n, k] and b [k, m] given as row-major vectors.
inline std::vector<double> NaiveMm(const std::vector<double>& a, const std::vector<double>& b, int64_t n, int64_t k,
                                   int64_t m) {
  std::vector<double> c(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * m + j];
      c[i * m + j] = s;
    }
  return c;
}

}  // namespace anvil::ops_test
