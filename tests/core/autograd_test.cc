// Autograd semantics from docs/pitfalls.md sections 1, 2 and 4: define-by-run, version counters,
// detach/clone, in-place rules, graph lifetime, hooks, higher order, custom functions,
// anomaly mode. Reference values are hand-derived derivatives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/anvil.h"
#include "tests/core/test_util.h"

using namespace anvil;
using ::testing::HasSubstr;

using namespace anvil::test;

namespace {

// A "model" whose branch depends on the batch size: whichever branch runs is what backprops.
Tensor BranchyModel(const Tensor& x, const Tensor& w) {
  if (x.size(0) > 2) return (x * w).sum() * 2;
  Tensor acc = x * 0;
  for (int i = 0; i < 3; ++i) acc = acc + x * w;  // a loop of ops, recorded as it runs
  return acc.sum();
}

TEST(DefineByRun, ControlFlowOnSizesBackpropsThroughTheBranchThatRan) {
  Tensor w = tensor({2.0}, kFloat64).requires_grad_();
  Tensor big = tensor({1.0, 2.0, 3.0}, kFloat64);
  BranchyModel(big, w).backward();
  EXPECT_DOUBLE_EQ(w.grad().item<double>(), 2 * (1 + 2 + 3));
  w.set_grad(Tensor());
  Tensor small = tensor({1.0, 2.0}, kFloat64);
  BranchyModel(small, w).backward();
  EXPECT_DOUBLE_EQ(w.grad().item<double>(), 3 * (1 + 2));
}

TEST(DefineByRun, ValuesAreMaterialisedImmediately) {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = x * 3;
  // No deferred execution: the data is there at this line.
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{3, 6}));
}

TEST(VersionCounter, InplaceOnSavedTensorRaisesNamingBothOps) {
  Tensor a = randn({2, 3}, kFloat64).requires_grad_();
  Tensor b = a * 2;        // b has history
  Tensor c = b.sigmoid();  // sigmoid saves its output c
  c.mul_(2);               // ... which is then modified in place
  std::string msg = ErrorOf([&] { c.sum().backward(); });
  EXPECT_THAT(msg, HasSubstr("modified by an inplace operation"));
  EXPECT_THAT(msg, HasSubstr("SigmoidBackward"));  // the op that saved it
  EXPECT_THAT(msg, HasSubstr("mul_"));             // the op that modified it
  EXPECT_THAT(msg, HasSubstr("float64 [2, 3]"));
  EXPECT_THAT(msg, HasSubstr("version 1"));
}

TEST(VersionCounter, SharedByViewsAndDetach) {
  Tensor a = zeros({4});
  Tensor v = a.narrow(0, 1, 2);
  Tensor d = a.detach();
  const uint64_t before = a._version();
  v.add_(1);
  EXPECT_EQ(a._version(), before + 1);
  EXPECT_EQ(d._version(), a._version());
  d.zero_();
  EXPECT_EQ(v._version(), before + 2);
}

TEST(VersionCounter, WritingThroughADetachedAliasIsCaught) {
  Tensor x = randn({3}, kFloat64).requires_grad_();
  Tensor y = x.exp();  // saves y
  y.detach().zero_();  // same storage: the saved value is gone
  EXPECT_THAT(ErrorOf([&] { y.sum().backward(); }), HasSubstr("zero_"));
}

TEST(Inplace, OnALeafThatRequiresGradRaisesAtOnce) {
  Tensor w = randn({3}).requires_grad_();
  EXPECT_THAT(ErrorOf([&] { w.add_(1); }), HasSubstr("leaf tensor that requires grad"));
  EXPECT_THAT(ErrorOf([&] { w.narrow(0, 0, 1).fill_(0); }), HasSubstr("view of a leaf"));
  {
    NoGradGuard no_grad;  // allowed where optimizers do it
    w.add_(1);
  }
}

TEST(Inplace, OnNonLeafKeepsCorrectGradients) {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  Tensor y = x * 2;
  y.mul_(y.detach() + 1);  // y = 2x * (2x + 1) with the factor treated as constant
  y.sum().backward();
  // d/dx [2x * c] = 2c with c = 2x + 1
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 10, 14}));
}

TEST(Inplace, ThroughAViewRebasesTheBaseHistory) {
  // base = 2x; base[1:3] = w * 10 (in place, via a view); loss = sum(base * [1,2,3,4])
  Tensor x = tensor({1.0, 1.0, 1.0, 1.0}, kFloat64).requires_grad_();
  Tensor w = tensor({1.0, 1.0}, kFloat64).requires_grad_();
  Tensor base = x * 2;
  Tensor view = base.narrow(0, 1, 2);
  view.copy_(w * 10);
  Tensor k = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64);
  (base * k).sum().backward();
  // Overwritten positions pass no gradient to x; w gets 10 * k[1:3].
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 0, 0, 8}));
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{20, 30}));
}

TEST(Inplace, ViewHistoryAfterWriteIsAWindowOfTheBase) {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  Tensor base = x.clone();
  Tensor v = base.narrow(0, 0, 2);
  v.mul_(3);                 // base[0:2] *= 3 through the view
  (v * v).sum().backward();  // uses the view after the write
  // v = 3 * x[0:2]  ->  d/dx sum(v^2) = 2 * v * 3 = 18 x
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{18, 36, 0}));
}

TEST(DetachClone, Semantics) {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor c = x.clone();
  Tensor d = x.detach();
  EXPECT_FALSE(c.is_alias_of(x));
  EXPECT_TRUE(d.is_alias_of(x));
  EXPECT_TRUE(c.requires_grad());
  EXPECT_FALSE(d.requires_grad());
  Tensor cd = x.clone().detach();
  EXPECT_FALSE(cd.is_alias_of(x));
  EXPECT_FALSE(cd.requires_grad());
  (c * 3).sum().backward();  // the grad path runs through clone
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_THAT(ErrorOf([&] { (d * 3).sum().backward(); }), HasSubstr("does not require grad"));
}

TEST(GraphLifetime, BackwardTwiceRaisesUnlessRetained) {
  Tensor x = randn({3}, kFloat64).requires_grad_();
  Tensor y = (x.exp() * 2).sum();
  y.backward({}, /*retain_graph=*/true);
  Tensor g1 = x.grad().clone();
  y.backward();
  EXPECT_TRUE(allclose(x.grad(), g1 * 2));  // accumulated twice
  EXPECT_THAT(ErrorOf([&] { y.backward(); }), HasSubstr("backward through the graph a second time"));
}

TEST(GradAccumulation, GradsAccumulateUntilCleared) {
  Tensor w = tensor({1.0}, kFloat64).requires_grad_();
  (w * 2).sum().backward();
  (w * 3).sum().backward();
  EXPECT_DOUBLE_EQ(w.grad().item<double>(), 5.0);
  w.set_grad(Tensor());
  (w * 3).sum().backward();
  EXPECT_DOUBLE_EQ(w.grad().item<double>(), 3.0);
}

TEST(GradAccumulation, KMicroBatchesEqualOneBigBatch) {
  manual_seed(7);
  Tensor X = randn({8, 3}, kFloat64), Y = randn({8, 1}, kFloat64);
  Tensor w1 = randn({3, 1}, kFloat64).requires_grad_();
  Tensor w2 = w1.detach().clone().requires_grad_();
  mean(square(matmul(X, w1) - Y)).backward();
  for (int k = 0; k < 4; ++k) {
    Tensor xb = X.narrow(0, 2 * k, 2), yb = Y.narrow(0, 2 * k, 2);
    (mean(square(matmul(xb, w2) - yb)) / 4).backward();
  }
  EXPECT_TRUE(allclose(w1.grad(), w2.grad(), 1e-12, 1e-12));
}

TEST(Hooks, TensorHookSeesAndReplacesGradient) {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = x * 3;
  Tensor seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.clone();
    return g * 10;
  });
  y.sum().backward();
  EXPECT_EQ(seen.to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{30, 30}));
}

TEST(Hooks, RetainGradKeepsANonLeafGradient) {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = x * x;
  y.retain_grad();
  (y * 4).sum().backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{4, 4}));
}

TEST(Grad, FunctionalGradDoesNotTouchDotGrad) {
  Tensor x = tensor({3.0}, kFloat64).requires_grad_();
  Tensor y = x * x * x;
  auto g = autograd::grad({y}, {x}, {}, {}, /*create_graph=*/true);
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 27.0);  // 3x^2
  EXPECT_FALSE(x.grad().defined());
  auto gg = autograd::grad({g[0]}, {x});
  EXPECT_DOUBLE_EQ(gg[0].item<double>(), 18.0);  // 6x
}

TEST(Grad, UnusedInputIsAnErrorUnlessAllowed) {
  Tensor x = tensor({1.0}, kFloat64).requires_grad_();
  Tensor z = tensor({1.0}, kFloat64).requires_grad_();
  Tensor y = x * 2;
  EXPECT_THAT(ErrorOf([&] { autograd::grad({y}, {z}, {}, true); }), HasSubstr("allow_unused"));
  auto g = autograd::grad({y}, {z}, {}, true, false, true);
  EXPECT_FALSE(g[0].defined());
}

TEST(NoGrad, GuardStopsRecordingAndIsThreadLocal) {
  Tensor x = randn({2}).requires_grad_();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE((x * 2).requires_grad());
  }
  EXPECT_TRUE((x * 2).requires_grad());
}

struct Cube : autograd::Function<Cube> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, double scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    return x * x * x * scale;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    Tensor x = ctx->get_saved_variables()[0];
    const double s = std::get<double>(ctx->saved_data["scale"]);
    return {g[0] * x * x * (3 * s), Tensor()};
  }
};

TEST(CustomFunction, BackwardIsUsedAndPassesGradcheck) {
  Tensor x = tensor({1.0, -2.0}, kFloat64).requires_grad_();
  Cube::apply(x, 2.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 24}));
  auto r =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{Cube::apply(in[0], 0.5)}; },
                          {randn({4}, kFloat64).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

// Values and their argmax: the indices are marked non-differentiable, so they never require
// grad and backward gets no gradient for them, as in PyTorch's ctx.mark_non_differentiable.
struct MaxWithIndex : autograd::Function<MaxWithIndex> {
  static std::vector<Tensor> forward(autograd::AutogradContext* ctx, Tensor x) {
    auto [values, indices] = max(x, 1);
    ctx->save_for_backward({indices});
    ctx->saved_data["width"] = x.size(1);
    ctx->mark_non_differentiable({indices});
    return {values, indices};
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    EXPECT_FALSE(g[1].defined() && g[1].abs().sum().item<double>() != 0) << "no gradient for the indices";
    const Tensor indices = ctx->get_saved_variables()[0];
    const int64_t width = std::get<int64_t>(ctx->saved_data["width"]);
    Tensor gx = zeros({indices.size(0), width}, TensorOptions(g[0].dtype()));
    return {scatter(gx, 1, indices.unsqueeze(1), g[0].unsqueeze(1))};
  }
};

TEST(CustomFunction, MarkNonDifferentiableOutputsNeverRequireGrad) {
  Tensor x = tensor({1.0, 5.0, 2.0, 7.0, 3.0, 0.0}, kFloat64).reshape({2, 3}).requires_grad_();
  const std::vector<Tensor> out = MaxWithIndex::apply(x);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[1].to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  (out[0] * tensor({2.0, 3.0}, kFloat64)).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 0, 3, 0, 0}));
}

TEST(AnomalyMode, NamesTheForwardOpWhoseBackwardProducedNaN) {
  Tensor x = tensor({0.0, 1.0}, kFloat64).requires_grad_();
  DetectAnomalyGuard anomaly;
  Tensor y = sqrt(x);  // d/dx sqrt(x) at 0 is inf
  std::string msg = ErrorOf([&] { y.sum().backward(); });
  EXPECT_THAT(msg, HasSubstr("SqrtBackward"));
  EXPECT_THAT(msg, HasSubstr("forward op 'sqrt'"));
}

TEST(RequiresGrad, OnlyFloatingLeavesAndPrintingShowsHistory) {
  EXPECT_THROW(arange(3).requires_grad_(), TypeError);
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  EXPECT_THAT(to_string(x), HasSubstr("requires_grad=True"));
  EXPECT_THAT(to_string(x * 2), HasSubstr("grad_fn=<MulBackward>"));
}

}  // namespace

// A leaf's .grad takes a fresh gradient buffer as it is (no copy per parameter per step), but
// never one that someone else still holds.
TEST(AccumulateGrad, LeafGradientsNeverAliasATensorSomeoneElseHolds) {
  Tensor x = ones({3}).requires_grad_();
  Tensor g = full({3}, 2.0);
  x.backward(g);  // the caller keeps g
  g.add_(1.0);
  EXPECT_EQ(Vals(x.grad()), (std::vector<double>{2, 2, 2}));
  EXPECT_FALSE(x.grad().is_alias_of(g));

  // clone's backward passes its gradient through: the retained y.grad and a.grad stay apart.
  Tensor a = ones({3}).requires_grad_();
  Tensor y = a.clone();
  y.retain_grad();
  y.sum().backward();
  EXPECT_FALSE(a.grad().is_alias_of(y.grad()));
  Tensor a_grad = a.grad();
  a_grad.add_(1.0);
  EXPECT_EQ(Vals(y.grad()), (std::vector<double>{1, 1, 1}));

  // Two leaves fed the same gradient by one add get separate buffers.
  Tensor p = ones({2}).requires_grad_(), q = ones({2}).requires_grad_();
  (p + q).sum().backward();
  EXPECT_FALSE(p.grad().is_alias_of(q.grad()));
  Tensor p_grad = p.grad();
  p_grad.mul_(5.0);
  EXPECT_EQ(Vals(q.grad()), (std::vector<double>{1, 1}));

  // A gradient taken as it is still accumulates over a second backward.
  (a * 3.0).sum().backward();
  EXPECT_EQ(Vals(a.grad()), (std::vector<double>{5, 5, 5}));
}

// Linear's weight enters its product transposed (x @ W.t()); its gradient is computed in W's own
// layout, so .grad arrives dense, as a tensor of its own, equal to g^T x.
TEST(AccumulateGrad, LinearWeightGradientArrivesDenseAndExact) {
  manual_seed(3);
  Tensor x = randn({5, 4}, kFloat64), w = randn({3, 4}, kFloat64).requires_grad_();
  Tensor g = randn({5, 3}, kFloat64);
  (x.matmul(w.t()) * g).sum().backward();
  const Tensor gw = w.grad();
  EXPECT_TRUE(gw.is_contiguous());
  EXPECT_FALSE(gw.is_view());
  EXPECT_EQ(gw.sizes(), (IntArray{3, 4}));
  const std::vector<double> xs = Vals(x), gs = Vals(g), got = Vals(gw);
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 4; ++i) {
      double want = 0;
      for (int n = 0; n < 5; ++n) want += gs[static_cast<size_t>(n * 3 + o)] * xs[static_cast<size_t>(n * 4 + i)];
      EXPECT_NEAR(got[static_cast<size_t>(o * 4 + i)], want, 1e-12) << o << "," << i;
    }
  }
  // Accumulating a second backward adds into the same dense buffer.
  (x.matmul(w.t()) * g).sum().backward();
  EXPECT_NEAR(Vals(w.grad())[0], 2 * got[0], 1e-12);
}
