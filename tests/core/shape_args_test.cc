// Shape and dims arguments in every form C++ code holds them, at every factory and view that
// takes one (libtorch's IntArrayRef takes a braced list, a std::vector<int64_t>, a std::array
// and a pointer with a length): each form compiles and gives the tensor the braced list gives.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "core/anvil.h"

namespace anvil {
namespace {

// Calls `make` with the two values of `arg` as a braced list, a std::vector<int64_t>, a
// std::array, an IntArrayRef over a pointer and a length, and an IntArray; every result must
// have the braced list's sizes (and values, for deterministic calls). Returns the braced
// list's result.
template <typename Make>
Tensor EveryForm(Make make, const IntArray& arg, bool compare_values = true) {
  const std::vector<int64_t> vec(arg.begin(), arg.end());
  EXPECT_EQ(vec.size(), 2u) << "the forms below hold two values";
  const std::array<int64_t, 2> arr = {vec[0], vec[1]};
  const int64_t raw[2] = {vec[0], vec[1]};
  const Tensor from_list = make({vec[0], vec[1]});
  const std::vector<Tensor> others = {make(vec), make(arr), make(IntArrayRef(raw, 2)), make(IntArray(vec))};
  for (const Tensor& t : others) {
    EXPECT_EQ(t.sizes(), from_list.sizes());
    if (compare_values) {
      EXPECT_TRUE(equal(t, from_list));
    }
  }
  return from_list;
}

TEST(ShapeArguments, EveryFactoryTakesEveryForm) {
  EXPECT_EQ(EveryForm([](IntArray s) { return zeros(s); }, {2, 3}).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(EveryForm([](IntArray s) { return ones(s); }, {2, 3}).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(EveryForm([](IntArray s) { return full(s, 2.5); }, {2, 3}).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(EveryForm([](IntArray s) { return empty(s); }, {2, 3}, false).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(EveryForm([](IntArray s) { return empty_strided({2, 3}, s); }, {3, 1}, false).strides(), (IntArray{3, 1}));
  EXPECT_EQ(EveryForm([](IntArray s) { return rand(s); }, {2, 3}, false).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(EveryForm([](IntArray s) { return randn(s); }, {2, 3}, false).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(EveryForm([](IntArray s) { return randint(0, 5, s); }, {2, 3}, false).sizes(), (IntArray{2, 3}));
  // The common user code, spelled out: a shape held in a std::vector or a std::array.
  std::vector<int64_t> shape = {4, 5};
  EXPECT_EQ(randn(shape).sizes(), (IntArray{4, 5}));
  EXPECT_EQ(zeros(shape, kFloat64).dtype(), kFloat64);
  const std::array<int64_t, 3> fixed = {2, 1, 3};
  EXPECT_EQ(ones(fixed).sizes(), (IntArray{2, 1, 3}));
}

TEST(ShapeArguments, EveryViewAndDimsArgumentTakesEveryForm) {
  const Tensor x = arange(24.0).reshape({4, 6});
  EXPECT_EQ(EveryForm([&](IntArray s) { return x.view(s); }, {6, 4}).sizes(), (IntArray{6, 4}));
  EXPECT_EQ(EveryForm([&](IntArray s) { return x.reshape(s); }, {3, 8}).sizes(), (IntArray{3, 8}));
  EXPECT_EQ(EveryForm([&](IntArray s) { return x.permute(s); }, {1, 0}).sizes(), (IntArray{6, 4}));
  EXPECT_EQ(EveryForm([&](IntArray s) { return x.sum(s); }, {0, 1}).dim(), 0);
  EXPECT_EQ(EveryForm([&](IntArray s) { return mean(x, s, true); }, {0, 1}).sizes(), (IntArray{1, 1}));
  const Tensor col = arange(3.0).reshape({3, 1});
  EXPECT_EQ(EveryForm([&](IntArray s) { return col.expand(s); }, {3, 5}).sizes(), (IntArray{3, 5}));
  EXPECT_EQ(EveryForm([&](IntArray s) { return x.as_strided({6, 4}, s); }, {1, 6}).strides(), (IntArray{1, 6}));
  const Tensor flat = arange(12.0);
  EXPECT_EQ(EveryForm([&](IntArray s) { return flat.unflatten(0, s); }, {3, 4}).sizes(), (IntArray{3, 4}));
}

}  // namespace
}  // namespace anvil
