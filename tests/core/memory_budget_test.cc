// MemoryBudget (core/tensor/memory_budget.h): what a scope charges, when it refuses, and that a
// refusal allocates nothing and leaves the budget as it was.
#include "core/tensor/memory_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "core/anvil.h"

namespace anvil {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(MemoryBudget, StorageAllocatedInAScopeIsChargedUntilItDies) {
  auto budget = std::make_shared<MemoryBudget>(8 * kMiB, "this test's work");
  Tensor outside = empty({1024}, kFloat32);  // before the scope: not charged
  {
    MemoryBudgetScope scope(budget);
    Tensor a = empty({256, 1024}, kFloat32);  // 1 MiB
    EXPECT_EQ(budget->live(), kMiB);
    Tensor view = a.narrow(0, 0, 16).t();  // views share the storage: charged once
    Tensor b = a + 1.0;                    // an op's output: charged
    EXPECT_EQ(budget->live(), 2 * kMiB);
    a = Tensor();
    EXPECT_EQ(budget->live(), 2 * kMiB) << "the view still holds a's storage";
    view = Tensor();
    EXPECT_EQ(budget->live(), kMiB);
    outside = outside + 1.0;  // 4 KiB, inside the scope
    EXPECT_EQ(budget->live(), kMiB + 4096);
  }
  EXPECT_EQ(budget->live(), 4096) << "b died with the scope; `outside` lives on, charged";
  EXPECT_GE(budget->peak(), 2 * kMiB);
  EXPECT_LT(budget->peak(), 2 * kMiB + 4096);
  Tensor after = empty({1 << 20}, kFloat32);  // after the scope: not charged
  EXPECT_EQ(budget->live(), 4096);
  outside = Tensor();
  EXPECT_EQ(budget->live(), 0);
}

TEST(MemoryBudget, AChargeBeyondTheLimitThrowsBeforeAllocatingAndChangesNothing) {
  auto budget = std::make_shared<MemoryBudget>(3 * kMiB, "this Predict's forward", "--max-predict-memory");
  MemoryBudgetScope scope(budget);
  Tensor a = empty({2 * 256 * 1024}, kFloat32);  // 2 MiB
  const int64_t allocated = cpu_allocator()->stats().allocated_bytes;
  try {
    Tensor huge = empty({int64_t{1} << 40}, kFloat32);  // 4 TiB: would be an OOM kill, not an error
    FAIL() << "allocated beyond the budget";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("this Predict's forward would hold more than 3.0 MiB of tensors at once"));
    EXPECT_THAT(e.what(), HasSubstr("it held 2.0 MiB and asked for 4.0 TiB more"));
    EXPECT_THAT(e.what(), HasSubstr("--max-predict-memory"));
  }
  EXPECT_EQ(cpu_allocator()->stats().allocated_bytes, allocated) << "the refused storage was allocated";
  EXPECT_EQ(budget->live(), 2 * kMiB);
  Tensor fits = empty({256 * 1024}, kFloat32);  // 1 MiB more still fits exactly
  EXPECT_EQ(budget->live(), 3 * kMiB);
  EXPECT_THROW(empty({1}, kFloat32), OutOfMemoryError);
}

TEST(MemoryBudget, ScopesNestAndStorageReleasedOnAnotherThreadIsReturned) {
  auto outer = std::make_shared<MemoryBudget>(8 * kMiB, "outer");
  auto inner = std::make_shared<MemoryBudget>(8 * kMiB, "inner");
  Tensor kept;
  {
    MemoryBudgetScope a(outer);
    Tensor x = empty({1024}, kFloat32);
    {
      MemoryBudgetScope b(inner);
      kept = empty({256 * 1024}, kFloat32);
      EXPECT_EQ(inner->live(), kMiB);
      EXPECT_EQ(outer->live(), 4096);
    }
    Tensor y = empty({1024}, kFloat32);
    EXPECT_EQ(outer->live(), 8192) << "the outer budget is current again";
  }
  EXPECT_EQ(current_memory_budget(), nullptr);
  std::thread([t = std::move(kept)]() mutable { t = Tensor(); }).join();
  EXPECT_EQ(inner->live(), 0);
  // Another thread has no budget of its own.
  std::thread([&] {
    EXPECT_EQ(current_memory_budget(), nullptr);
    Tensor z = empty({1024}, kFloat32);
  }).join();
  EXPECT_EQ(outer->live(), 0);
}

TEST(MemoryBudget, DescribesSizesAndRefusesANonPositiveLimit) {
  EXPECT_EQ(describe_bytes(12), "12 bytes");
  EXPECT_EQ(describe_bytes(640 * 1024), "640.0 KiB");
  EXPECT_EQ(describe_bytes(3 * (int64_t{1} << 29)), "1.5 GiB");
  EXPECT_THROW(MemoryBudget(0, "x"), Error);
}

}  // namespace
}  // namespace anvil
