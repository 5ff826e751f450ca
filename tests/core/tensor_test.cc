#include <gtest/gtest.h>

#include "core/anvil.h"

using namespace anvil;

TEST(Smoke, AddAndBackward) {
  Tensor a = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor b = (a * a).sum();
  b.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));
}
