// Walks the op table: every differentiable row must have a sample here, and every sample
// must pass gradcheck (first derivatives) and gradgradcheck (second derivatives) against
// central differences in float64, with broadcasting and non-contiguous inputs.
#include <gtest/gtest.h>

#include <map>

#include "core/anvil.h"
#include "core/autograd/derivatives.h"
#include "core/ops/op_table.h"
#include "tests/core/op_samples.h"

using namespace anvil;
using autograd::gradcheck;
using autograd::gradgradcheck;
using autograd::TensorFn;

namespace {

using anvil::samples::MakeOpSamples;
using anvil::samples::OpSample;

TensorFn U(Tensor (*f)(const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x[0])}; };
}
template <typename F>
TensorFn L(F f) {
  return [f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x)}; };
}

TEST(GradcheckTable, EveryDifferentiableOpHasASample) {
  const auto s = MakeOpSamples();
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    if (!info.differentiable) continue;
    EXPECT_TRUE(autograd::has_backward_rule(info.id)) << info.name << " has no backward rule";
    EXPECT_TRUE(s.count(info.id)) << "differentiable op '" << info.name << "' has no gradcheck sample";
  }
}

TEST(GradcheckTable, FirstDerivativesMatchFiniteDifferences) {
  int checked = 0;
  for (auto& [op, samples] : MakeOpSamples()) {
    for (auto& sm : samples) {
      SCOPED_TRACE(sm.name);
      auto r = gradcheck(sm.fn, sm.inputs, {1e-6, 1e-5, 1e-3, false});
      EXPECT_TRUE(r.ok) << sm.name << ": " << r.message;
      ++checked;
    }
  }
  EXPECT_GT(checked, 70);
}

TEST(GradcheckTable, SecondDerivativesMatchFiniteDifferences) {
  for (auto& [op, samples] : MakeOpSamples()) {
    for (auto& sm : samples) {
      if (!sm.second_order) continue;
      SCOPED_TRACE(sm.name);
      auto r = gradgradcheck(sm.fn, sm.inputs, {1e-6, 1e-5, 1e-3, false});
      EXPECT_TRUE(r.ok) << sm.name << ": " << r.message;
    }
  }
}

// Random shapes: for binary/ternary element-wise rows, draw broadcast-compatible shapes of
// rank 0-3 (some operands transposed, so non-contiguous) and check gradients.
TEST(GradcheckTable, RandomBroadcastShapes) {
  manual_seed(99);
  auto draw = [](IntArray full) {
    // Each dim independently kept or squashed to 1; leading dims sometimes dropped.
    Tensor r = randint(0, 4, {static_cast<int64_t>(full.size()) + 1});
    std::vector<int64_t> coin = r.to_vector<int64_t>();
    IntArray s;
    const size_t drop = static_cast<size_t>(coin.back() % (full.size() + 1));
    for (size_t i = drop; i < full.size(); ++i) s.push_back(coin[i] == 0 ? 1 : full[i]);
    return s;
  };
  auto leaf = [](const IntArray& s, bool transpose) {
    if (transpose && s.size() >= 2) {
      IntArray rs = s;
      std::swap(rs[rs.size() - 1], rs[rs.size() - 2]);
      return randn(rs, kFloat64).transpose(-1, -2).detach().requires_grad_();
    }
    return randn(s, kFloat64).requires_grad_();
  };
  using Bin = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Bin> ops[] = {
      {"mul", &mul},
      {"maximum", &maximum},
      {"atan2", &atan2},
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b.abs() + 0.5); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a.abs() + 0.5, b); }},
      {"where", [](const Tensor& a, const Tensor& b) { return where(a.detach() > 0, a, b); }},
  };
  int checked = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t rank = trial % 4;
    IntArray full;
    for (int64_t d = 0; d < rank; ++d) full.push_back(2 + (trial + d) % 3);
    for (const auto& [name, f] : ops) {
      Tensor a = leaf(draw(full), trial % 2 == 0), b = leaf(draw(full), trial % 3 == 0);
      SCOPED_TRACE(std::string(name) + " " + shape_str(a.sizes()) + " x " + shape_str(b.sizes()));
      auto r = gradcheck([f = f](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x[0], x[1])}; }, {a, b},
                         {1e-6, 1e-5, 1e-3, false});
      EXPECT_TRUE(r.ok) << r.message;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 48);
}

// Ops composed outside the table (selections over the sort row, repeat over expand, and
// scatter_reduce's own backward): first and second derivatives against finite differences.
TEST(Gradcheck, CompositeSelectionsAndScatterReduce) {
  const Tensor idx = tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 0, 0, 2, 2}).reshape({3, 4});
  const std::vector<std::pair<std::string, TensorFn>> cases = {
      {"kthvalue", [](const std::vector<Tensor>& x) { return std::vector<Tensor>{std::get<0>(kthvalue(x[0], 2, 1))}; }},
      {"median_dim", [](const std::vector<Tensor>& x) { return std::vector<Tensor>{std::get<0>(median(x[0], 0))}; }},
      {"median_all", [](const std::vector<Tensor>& x) { return std::vector<Tensor>{median(x[0])}; }},
      {"repeat",
       [](const std::vector<Tensor>& x) {
         return std::vector<Tensor>{x[0].repeat({2, 1, 2}) * 1.5};
       }},
      {"tile", [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].t().tile({2})}; }},
      {"as_strided_of_transpose",
       [](const std::vector<Tensor>& x) {
         return std::vector<Tensor>{x[0].t().as_strided({2, 3}, {1, 2}, 1) * 2};
       }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    Tensor x = randn({3, 4}, kFloat64).requires_grad_();
    try {
      auto r = gradcheck(f, {x});
      EXPECT_TRUE(r.ok) << r.message;
      r = gradgradcheck(f, {x});
      EXPECT_TRUE(r.ok) << r.message;
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  for (const std::string reduce : {"sum", "prod", "mean", "amax", "amin"}) {
    for (bool include_self : {true, false}) {
      SCOPED_TRACE(reduce + (include_self ? " with self" : " without self"));
      TensorFn f = [&](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{scatter_reduce(x[0], 0, idx, x[1], reduce, include_self)};
      };
      Tensor self = randn({3, 4}, kFloat64).requires_grad_(), src = randn({3, 4}, kFloat64).requires_grad_();
      try {
        auto r = gradcheck(f, {self, src});
        EXPECT_TRUE(r.ok) << r.message;
        if (reduce != "amax" && reduce != "amin") {  // piecewise linear: the second derivative is 0 a.e.
          r = gradgradcheck(f, {self, src});
          EXPECT_TRUE(r.ok) << r.message;
        }
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
      }
    }
  }
}

TEST(Gradcheck, RefusesFloat32WithAnExplanation) {
  Tensor x = randn({3}).requires_grad_();
  try {
    gradcheck(U(&exp), {x});
    FAIL() << "expected a TypeError";
  } catch (const TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
}

TEST(Gradcheck, ReportsTheWorstElementOfAWrongGradient) {
  // A custom function with a deliberately wrong backward (factor 3 instead of 2).
  struct BadSquare : autograd::Function<BadSquare> {
    static Tensor forward(autograd::AutogradContext* ctx, Tensor x) {
      ctx->save_for_backward({x});
      return x * x;
    }
    static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
      return {g[0] * ctx->get_saved_variables()[0] * 3};
    }
  };
  Tensor x = tensor({1.0, -2.0, 0.5}, kFloat64).requires_grad_();
  auto r = gradcheck(L([](auto& in) { return BadSquare::apply(in[0]); }), {x}, {1e-6, 1e-5, 1e-3, false});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.input_element, 1);  // |x| largest -> largest absolute error
  EXPECT_NEAR(r.numerical, -4.0, 1e-6);
  EXPECT_NEAR(r.analytical, -6.0, 1e-12);
  EXPECT_THROW(gradcheck(L([](auto& in) { return BadSquare::apply(in[0]); }), {x}), Error);
}

}  // namespace
