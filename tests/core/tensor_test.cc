#include <gtest/gtest.h>

#include "core/anvil.h"

using namespace anvil;

TEST(Smoke, AddAndBackward) {
  Tensor a = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor b = (a * a).sum();
  b.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));
}

// Found by the IDX fuzzer: a zero-size dim keeps numel at 0, but the strides of the other
// dims can still overflow int64; that is an error naming the shape (as PyTorch's "Storage size
// calculation overflowed"), not undefined behaviour.
TEST(Smoke, ZeroSizeShapesWhoseStridesOverflowAreRefused) {
  try {
    (void)empty({0, int64_t{1} << 40, int64_t{1} << 40});
    ADD_FAILURE() << "strides of [0, 2^40, 2^40] were computed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("strides overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(empty({0, int64_t{1} << 40}).numel(), 0);  // strides fit: allowed
  EXPECT_EQ(empty({int64_t{1} << 40, 0}).stride(0), 1);
}
