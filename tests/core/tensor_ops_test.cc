// Forward values of the conversions, printing and element access of tensors,
// against references that do not come from the engine: float64 std:: math, naive loops,
// hand-worked examples (many from PyTorch's documentation) and PyTorch's documented semantics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "tests/core/ops_test_util.h"
#include "tests/core/test_util.h"

using namespace anvil;
using namespace anvil::test;
using namespace anvil::ops_test;
using ::testing::HasSubstr;

TEST(Conversion, FloatToIntTruncatesTowardZero) {
  Tensor f = F32({-1.7f, -0.5f, 0.5f, 1.7f, 2.0f});
  Tensor i = f.to(kInt64);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{-1, 0, 0, 1, 2}));
  EXPECT_EQ(Longs(f.to(kInt32)), (std::vector<int64_t>{-1, 0, 0, 1, 2}));
  // To bool: non-zero is true.
  EXPECT_EQ(Bools(F32({0, 0.5, -2}).to(kBool)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(Vals(Bool({true, false}).to(kFloat32)), (std::vector<double>{1, 0}));
  // int64 -> uint8 wraps modulo 256.
  EXPECT_EQ(Longs(I64({300, 255, 256}).to(kUInt8)), (std::vector<int64_t>{44, 255, 0}));
  // Large int64 -> float64 exactly representable.
  EXPECT_EQ(I64({int64_t{1} << 52}).to(kFloat64).item<double>(), std::ldexp(1.0, 52));
}

TEST(Conversion, HalfAndBFloat16RoundTrip) {
  // Exactly representable values survive both ways.
  Tensor exact = F32({0.5f, -3.25f, 1024.0f, 0.0f, -0.0f, 65504.0f});
  EXPECT_EQ(Vals(exact.to(kFloat16).to(kFloat32)), Vals(exact));
  Tensor bexact = F32({0.5f, -3.25f, 1024.0f, 0.0f, 1.5f, 0x1p127f});
  EXPECT_EQ(Vals(bexact.to(kBFloat16).to(kFloat32)), Vals(bexact));
  // Round to nearest: 0.1 in float16 is 1638/16384 = 0.0999755859375; 1/3 in bfloat16 is
  // 171/512 = 0.333984375 (hand-computed from the 10- and 7-bit mantissas).
  EXPECT_EQ(F64({0.1}).to(kFloat16).item<double>(), 0.0999755859375);
  EXPECT_EQ(F64({1.0 / 3}).to(kBFloat16).item<double>(), 0.333984375);
  // float16 overflows past 65504; bfloat16 keeps float32's range (70000 -> 70144).
  EXPECT_EQ(F32({70000}).to(kFloat16).item<double>(), kInf);
  EXPECT_EQ(F32({70000}).to(kBFloat16).item<double>(), 70144.0);
  // Ties round to even: 2049 is halfway between float16's 2048 and 2050.
  EXPECT_EQ(F32({2049}).to(kFloat16).item<double>(), 2048.0);
  EXPECT_EQ(F32({2051}).to(kFloat16).item<double>(), 2052.0);
  // NaN stays NaN.
  EXPECT_TRUE(std::isnan(F32({static_cast<float>(kNaN)}).to(kFloat16).item<double>()));
  EXPECT_TRUE(std::isnan(F32({static_cast<float>(kNaN)}).to(kBFloat16).item<double>()));
  // Arithmetic in half precision rounds its result to half.
  Tensor h = F32({2048}).to(kFloat16);
  EXPECT_EQ((h + 1).item<double>(), 2048.0);
  EXPECT_EQ((h + 2).item<double>(), 2050.0);
  EXPECT_EQ(h.element_size(), 2);
}

TEST(Conversion, CopyWithBroadcastAndCast) {
  Tensor dst = zeros({2, 3});
  dst.copy_(F32({1, 2, 3}));
  EXPECT_EQ(Vals(dst), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  dst.copy_(I64({7, 8}, IntArray{2, 1}));
  EXPECT_EQ(Vals(dst), (std::vector<double>{7, 7, 7, 8, 8, 8}));
  dst.copy_(scalar_tensor(0.25, kFloat64));
  EXPECT_EQ(Vals(dst), std::vector<double>(6, 0.25));
  // Into a transposed view: the base receives the transpose.
  Tensor base = zeros({2, 3});
  base.t().copy_(Iota({3, 2}));
  EXPECT_EQ(Vals(base), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  // From a non-contiguous source.
  Tensor d2 = zeros({3, 2});
  d2.copy_(Iota({2, 3}).t());
  EXPECT_EQ(Vals(d2), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // Float into int truncates.
  Tensor di = zeros({2}, kInt64);
  di.copy_(F32({2.9f, -2.9f}));
  EXPECT_EQ(Longs(di), (std::vector<int64_t>{2, -2}));
  EXPECT_THROW(zeros({2, 3}).copy_(zeros({4})), Error);
  EXPECT_THROW(zeros({3}).copy_(zeros({2, 3})), Error);
}

// ====================================================================== printing / item / to_vector

TEST(Printing, PyTorchLikeRepr) {
  EXPECT_EQ(to_string(tensor({1.0, 2.0, 3.0})), "tensor([1., 2., 3.])");
  EXPECT_EQ(to_string(tensor({1.5, 2.25})), "tensor([1.5000, 2.2500])");
  EXPECT_EQ(to_string(tensor({-1.0, 2.0})), "tensor([-1.,  2.])");
  EXPECT_EQ(to_string(arange(3)), "tensor([0, 1, 2])");
  EXPECT_EQ(to_string(Bool({true, false})), "tensor([ True, False])");
  EXPECT_EQ(to_string(scalar_tensor(3.0)), "tensor(3.)");
  EXPECT_EQ(to_string(scalar_tensor(5, kInt64)), "tensor(5)");
  EXPECT_EQ(to_string(F32({1, 2, 3, 4}, IntArray{2, 2})), "tensor([[1., 2.],\n        [3., 4.]])");
  std::string d = to_string(F64({1, 2}));
  EXPECT_THAT(d, HasSubstr("tensor([1., 2.]"));
  EXPECT_THAT(d, HasSubstr("float64"));
  EXPECT_THAT(to_string(tensor({1.0, 2.0}).requires_grad_()), HasSubstr("requires_grad=True"));
  Tensor leaf = tensor({1.0, 2.0}).requires_grad_();
  EXPECT_THAT(to_string(leaf * 2), HasSubstr("grad_fn=<"));
  std::ostringstream os;
  os << tensor({0.5});
  EXPECT_EQ(os.str(), "tensor([0.5000])");
  EXPECT_EQ(to_string(F32({static_cast<float>(kNaN), static_cast<float>(kInf)})), "tensor([nan, inf])");
  // Printing a non-contiguous view prints its logical order.
  EXPECT_EQ(to_string(Iota({2, 2}).t()), "tensor([[0., 2.],\n        [1., 3.]])");
}

// Regression test (was an engine bug).
TEST(Printing, EmptyAndLargeTensorsLikePyTorch) {
  // torch.zeros(0) prints "tensor([])"; other empty shapes add ", size=(0, 3)".
  EXPECT_EQ(to_string(zeros({0})), "tensor([])");
  EXPECT_EQ(to_string(zeros({0, 3})), "tensor([], size=(0, 3))");
  // More than 1000 elements are summarised with the first and last three per dim.
  EXPECT_EQ(to_string(arange(2000)), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_LT(to_string(zeros({100, 100})).size(), 1000u);
}

TEST(ElementAccess, ItemAndToVector) {
  EXPECT_EQ(scalar_tensor(2.5).item<double>(), 2.5);
  EXPECT_EQ(scalar_tensor(2.5).item<float>(), 2.5f);
  EXPECT_EQ(I64({42}).item<int64_t>(), 42);
  EXPECT_EQ(F32({7}, IntArray{1, 1}).item<int64_t>(), 7);
  EXPECT_EQ(Bool({true}).item<bool>(), true);
  EXPECT_EQ(F32({0.0}).item<bool>(), false);
  EXPECT_EQ(F32({3.75}).to(kFloat16).item<double>(), 3.75);
  EXPECT_EQ(tensor(std::vector<int32_t>{-9}).item<int32_t>(), -9);
  // to_vector walks the logical (row-major) order of a view and converts the dtype.
  EXPECT_EQ(Iota({2, 3}).t().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(I64({1, 2}).to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(F32({1.9f, -1.9f}).to_vector<int64_t>(), (std::vector<int64_t>{1, -1}));
  // data_ptr<T> reads the raw buffer.
  Tensor x = F32({1, 2, 3});
  EXPECT_EQ(x.data_ptr<float>()[2], 3.0f);
}

// ====================================================================== factories
