// Forward values of the factories and random draws (core/ops/factories.cc),
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
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/anvil.h"
#include "tests/core/ops_test_util.h"
#include "tests/core/test_util.h"

using namespace anvil;
using namespace anvil::test;
using namespace anvil::ops_test;
using ::testing::HasSubstr;

TEST(Factories, ArangeLinspaceEyeFull) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(Longs(a), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Tensor af = arange(1, 2.5, 0.5);
  EXPECT_EQ(af.dtype(), kFloat32);
  EXPECT_EQ(Vals(af), (std::vector<double>{1, 1.5, 2}));
  EXPECT_EQ(Vals(arange(10, 0, -3, kInt64)), (std::vector<double>{10, 7, 4, 1}));
  EXPECT_EQ(arange(0.0, 1.0, 0.1).numel(), 10);
  EXPECT_EQ(arange(2.5).dtype(), kFloat32);
  EXPECT_EQ(arange(0).numel(), 0);
  Tensor l = linspace(0, 1, 5);
  EXPECT_EQ(l.dtype(), kFloat32);
  EXPECT_EQ(Vals(l), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(Vals(linspace(3, 3, 1)), (std::vector<double>{3}));
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(Vals(linspace(2, -2, 3)), (std::vector<double>{2, 0, -2}));
  Tensor e = eye(3);
  EXPECT_EQ(Vals(e), (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(Vals(eye(2, 3)), (std::vector<double>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(eye(2, std::nullopt, kInt64).dtype(), kInt64);
  Tensor f = full({2, 2}, 7, kInt64);
  EXPECT_EQ(Longs(f), (std::vector<int64_t>{7, 7, 7, 7}));
  EXPECT_EQ(Vals(full({3}, -0.5)), (std::vector<double>{-0.5, -0.5, -0.5}));
  EXPECT_EQ(zeros({2, 3}).dtype(), kFloat32);
  EXPECT_EQ(Vals(zeros({2})), (std::vector<double>{0, 0}));
  EXPECT_EQ(Vals(ones({2}, kFloat64)), (std::vector<double>{1, 1}));
  EXPECT_EQ(ones({2}, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(Vals(zeros_like(Iota({2}))), (std::vector<double>{0, 0}));
  EXPECT_EQ(ones_like(I64({1, 2})).dtype(), kInt64);
  EXPECT_EQ(Vals(full_like(Iota({2}), 3)), (std::vector<double>{3, 3}));
  EXPECT_EQ(empty({3, 0}).numel(), 0);
  EXPECT_EQ(scalar_tensor(4).dim(), 0);
  EXPECT_TRUE(zeros({2}, TensorOptions().with_requires_grad()).requires_grad());
  EXPECT_EQ(tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, IntArray{2, 3}).sizes(), (IntArray{2, 3}));
  EXPECT_EQ(tensor(std::vector<double>{1}).dtype(), kFloat64);
  EXPECT_EQ(tensor({1.0}).dtype(), kFloat32);
}

// torch.tensor / torch.full infer the dtype from the Python values; so do the C++ literals
// (float32 for integer literals was a porting trap).
TEST(Factories, LiteralsAndFillValuesKeepTheirKindAsInPyTorch) {
  EXPECT_EQ(tensor({1, 2, 3}).dtype(), kInt64);
  EXPECT_EQ(tensor({1, 2, 3}).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(tensor({1.0, 2.5}).dtype(), kFloat32);
  // A mixed list ({1, 2.5}) does not compile (ambiguous): write 1.0 as Python would make it float.
  EXPECT_EQ(tensor({true, false}).dtype(), kBool);
  EXPECT_EQ(tensor({1, 2}, kFloat64).dtype(), kFloat64);  // a given dtype wins
  EXPECT_EQ(full({2}, 3).dtype(), kInt64);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(full({2}, 3.5).dtype(), kFloat32);
  EXPECT_EQ(zeros({2}).dtype(), kFloat32);
  EXPECT_EQ(scalar_tensor(3).dtype(), kFloat32);  // torch.scalar_tensor(3) is float32
  EXPECT_EQ(linspace(2, 3, 1).item<float>(), 2.0f);
}

TEST(Factories, ArangeInfersIntegerDtypeFromIntegerBounds) {
  // torch.arange(0, 5) / torch::arange(0, 5) is int64: the dtype follows the arguments.
  EXPECT_EQ(arange(0, 5).dtype(), kInt64);
  EXPECT_EQ(arange(0, 5, 1).dtype(), kInt64);
  EXPECT_EQ(arange(0, 5, 0.5).dtype(), kFloat32);
}

TEST(Factories, LinspaceEndsExactlyAtEnd) {
  // torch.linspace's last value is `end` (computed from both ends).
  for (double end : {0.7, 0.3, 1.1, 2.9}) {
    Tensor l = linspace(0.1, end, 7, kFloat64);
    EXPECT_EQ(Vals(l).back(), end) << "end=" << end;
    EXPECT_EQ(Vals(l).front(), 0.1);
  }
}

TEST(Factories, FromBlobWrapsWithoutCopyAndCallsDeleter) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  bool deleted = false;
  {
    Tensor t = from_blob(buf.data(), {2, 3}, kFloat32, [&](void*) { deleted = true; });
    EXPECT_EQ(t.data_ptr(), static_cast<void*>(buf.data()));
    EXPECT_EQ(Vals(t.t()), (std::vector<double>{1, 4, 2, 5, 3, 6}));
    t.mul_(2);
    EXPECT_EQ(buf[5], 12.0f);
    EXPECT_FALSE(deleted);
  }
  EXPECT_TRUE(deleted);
}

// ====================================================================== random

TEST(Random, ManualSeedReproducible) {
  manual_seed(42);
  Tensor a = rand({1000});
  Tensor an = randn({100});
  manual_seed(42);
  Tensor b = rand({1000});
  Tensor bn = randn({100});
  EXPECT_TRUE(equal(a, b));
  EXPECT_TRUE(equal(an, bn));
  // The stream moves on: the next draw differs.
  Tensor c = rand({1000});
  EXPECT_FALSE(equal(a, c));
  manual_seed(43);
  EXPECT_FALSE(equal(rand({1000}), a));
  // A draw of n then m elements equals neither of a single draw reused (no overlap).
  manual_seed(42);
  Tensor p1 = rand({10});
  Tensor p2 = rand({10});
  EXPECT_FALSE(equal(p1, p2));
}

// A thread with its own default generator (a training job's) draws one seeded stream whatever
// other threads draw meanwhile (a model built for serving draws its initialisation from the
// process-wide generator); without it, the other thread's draws move the stream. Scopes nest
// and restore the generator before them.
TEST(Random, AThreadsOwnGeneratorIsNotMovedByOtherThreads) {
  const auto run = [](bool own, bool disturbed) {
    Generator job;
    std::vector<Tensor> draws;
    std::optional<ScopedDefaultGenerator> scope;
    if (own) scope.emplace(job);
    manual_seed(11);
    draws.push_back(randn({257}));
    if (disturbed) {
      std::thread other([] {
        for (int i = 0; i < 20; ++i) (void)randn({1000});
      });
      other.join();
    }
    draws.push_back(randn({257}));
    draws.push_back(rand({31}));
    return draws;
  };
  const std::vector<Tensor> alone = run(true, false), shared = run(true, true);
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_TRUE(equal(alone[i], shared[i])) << "draw " << i;
  // The control: on the process-wide generator the other thread's draws move the stream.
  const std::vector<Tensor> global_alone = run(false, false), global_shared = run(false, true);
  EXPECT_TRUE(equal(global_alone[0], global_shared[0]));
  EXPECT_FALSE(equal(global_alone[1], global_shared[1]));
  // Nesting: the inner scope's draws leave the outer generator where it was.
  Generator outer_gen, inner_gen;
  const ScopedDefaultGenerator outer(outer_gen);
  manual_seed(3);
  const auto before = outer_gen.get_state();
  {
    const ScopedDefaultGenerator inner(inner_gen);
    manual_seed(4);
    (void)randn({64});
    EXPECT_EQ(&default_generator(), &inner_gen);
  }
  EXPECT_EQ(&default_generator(), &outer_gen);
  EXPECT_EQ(outer_gen.get_state(), before);
}

TEST(Random, RandIsInHalfOpenUnitInterval) {
  manual_seed(1);
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor r = rand({100000}, dt);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_GE(r.min().item<double>(), 0.0) << dtype_name(dt);
    EXPECT_LT(r.max().item<double>(), 1.0) << dtype_name(dt);
    EXPECT_NEAR(r.to(kFloat64).mean().item<double>(), 0.5, 0.01) << dtype_name(dt);
  }
  // uniform_ with bounds.
  Tensor u = empty({10000}, kFloat64);
  u.uniform_(-2, 3);
  EXPECT_GE(u.min().item<double>(), -2.0);
  EXPECT_LT(u.max().item<double>(), 3.0);
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.05);
}

TEST(Random, RandnMoments) {
  manual_seed(2);
  Tensor r = randn({100000});
  // Standard error of the mean is 1/sqrt(1e5) ~ 0.0032; of the std ~ 0.0022.
  EXPECT_NEAR(r.mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(r.std().item<double>(), 1.0, 0.02);
  // About 68.3% within one sigma.
  double within = (abs(r) < 1.0).to(kFloat64).mean().item<double>();
  EXPECT_NEAR(within, 0.6827, 0.01);
  Tensor n = empty({100000}, kFloat64);
  n.normal_(3, 0.5);
  EXPECT_NEAR(n.mean().item<double>(), 3.0, 0.01);
  EXPECT_NEAR(n.std().item<double>(), 0.5, 0.01);
}

TEST(Random, RandintBounds) {
  manual_seed(3);
  Tensor r = randint(3, 7, {10000});
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(r.min().item<int64_t>(), 3);
  EXPECT_EQ(r.max().item<int64_t>(), 6);
  for (int v = 3; v < 7; ++v) {
    double frac = (r == v).to(kFloat64).mean().item<double>();
    EXPECT_NEAR(frac, 0.25, 0.03) << v;
  }
  Tensor neg = randint(-5, -4, {100});
  EXPECT_EQ(neg.min().item<int64_t>(), -5);
  EXPECT_EQ(neg.max().item<int64_t>(), -5);
  EXPECT_EQ(randint(0, 10, {2, 3}, kInt32).dtype(), kInt32);
}

TEST(Random, RandpermIsAPermutation) {
  manual_seed(4);
  Tensor p = randperm(1000);
  EXPECT_EQ(p.dtype(), kInt64);
  Tensor sorted = std::get<0>(sort(p));
  EXPECT_TRUE(equal(sorted, arange(1000)));
  EXPECT_FALSE(equal(p, arange(1000)));
  EXPECT_EQ(randperm(0).numel(), 0);
  EXPECT_EQ(Longs(randperm(1)), (std::vector<int64_t>{0}));
  // Roughly uniform first element over many permutations of 4.
  std::vector<int> count(4, 0);
  for (int k = 0; k < 400; ++k) count[Longs(randperm(4))[0]]++;
  for (int c : count) EXPECT_NEAR(c, 100, 40);
}

TEST(Random, BernoulliMean) {
  manual_seed(5);
  Tensor p = full({100000}, 0.3);
  Tensor b = bernoulli(p);
  EXPECT_EQ(b.dtype(), kFloat32);
  std::vector<double> bv = Vals(b);
  for (size_t i = 0; i < bv.size(); i += 997) EXPECT_TRUE(bv[i] == 0 || bv[i] == 1);
  EXPECT_NEAR(b.mean().item<double>(), 0.3, 0.01);
  // Per-element probabilities: 0 and 1 are certain.
  Tensor pe = F32({0, 1, 0, 1});
  EXPECT_EQ(Vals(bernoulli(pe)), (std::vector<double>{0, 1, 0, 1}));
  Tensor z = empty({50000});
  z.bernoulli_(0.8);
  EXPECT_NEAR(z.mean().item<double>(), 0.8, 0.01);
}

TEST(Random, ResultsIndependentOfThreadCount) {
  ThreadsGuard restore;
  std::vector<Tensor> draws[3];
  std::vector<double> rowsums[3];
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    manual_seed(99);
    auto& d = draws[threads - 1];
    d.push_back(rand({1 << 20}));
    d.push_back(randn({300001}, kFloat64));
    d.push_back(rand({1000003}, kFloat64));
    d.push_back(bernoulli(full({200001}, 0.5)));
    d.push_back(randint(0, 1000, {100003}));
    Tensor n = empty({100001}, kFloat64);
    n.normal_(1, 2);
    d.push_back(n);
    // Row sums: one row per output, each summed by one thread.
    rowsums[threads - 1] = Vals(d[2].narrow(0, 0, 1000000).view({1000, 1000}).sum({1}));
  }
  for (int t = 1; t < 3; ++t) {
    for (size_t k = 0; k < draws[0].size(); ++k) {
      EXPECT_TRUE(equal(draws[0][k], draws[t][k])) << "draw " << k << " differs with " << t + 1 << " threads";
    }
    EXPECT_EQ(rowsums[0], rowsums[t]);
  }
}
