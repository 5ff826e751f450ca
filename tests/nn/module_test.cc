// nn::Module: the tree, deduplication of shared parameters, modes, state_dict round trips and
// errors, summary; Linear, containers, dropout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "core/anvil.h"
#include "core/nn/activation.h"
#include "core/nn/container.h"
#include "core/nn/linear.h"
#include "tests/core/test_util.h"

namespace anvil::nn {
namespace {

using test::ErrorOf;
using test::Vals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

// Two layers sharing one Linear ("tied" weights), plus a buffer.
class Tied : public Module {
 public:
  Tied() : Module("Tied") {
    shared = register_module("encoder", std::make_shared<Linear>(4, 4));
    register_module("decoder", shared);
    head = register_module("head", std::make_shared<Linear>(4, 2, false));
    steps = zeros({1});
    register_buffer("steps", steps);
  }
  Tensor forward(const Tensor& x) override { return head->forward(shared->forward(shared->forward(x))); }
  std::shared_ptr<Linear> shared, head;
  Tensor steps;
};

TEST(ModuleTest, SharedSubmoduleParametersAreListedOnce) {
  Tied m;
  EXPECT_THAT(Names(m.named_parameters()), ElementsAre("encoder.weight", "encoder.bias", "head.weight"));
  EXPECT_EQ(m.num_parameters(), 4 * 4 + 4 + 2 * 4);
  EXPECT_THAT(Names(m.named_buffers()), ElementsAre("steps"));
  EXPECT_EQ(m.named_modules().size(), 3u);  // root, encoder (= decoder), head
}

TEST(ModuleTest, StateDictRecordsAliasesAndLoadsBackShared) {
  manual_seed(1);
  Tied a;
  manual_seed(2);
  Tied b;
  const StateDict sd = a.state_dict();
  EXPECT_EQ(sd.size(), 4u);  // encoder.weight, encoder.bias, head.weight, steps
  EXPECT_EQ(sd.aliases.at("decoder.weight"), "encoder.weight");
  b.load_state_dict(sd);
  EXPECT_TRUE(equal(b.shared->weight, a.shared->weight));
  // Still one tensor in b: training the encoder trains the decoder.
  EXPECT_TRUE(b.named_children()[0].second.get() == b.named_children()[1].second.get());
  Tensor x = randn({3, 4});
  EXPECT_TRUE(equal(a(x), b(x)));
}

TEST(ModuleTest, LoadStateDictErrorsNameKeysAndShapes) {
  Tied m;
  StateDict sd = m.state_dict();
  std::erase_if(sd.tensors, [](const auto& kv) { return kv.first == "encoder.weight"; });
  sd.tensors.emplace_back("extra.weight", zeros({1}));
  const std::string msg = ErrorOf([&] { m.load_state_dict(sd); });
  EXPECT_THAT(msg, HasSubstr("missing keys: 'encoder.weight', 'decoder.weight'"));
  EXPECT_THAT(msg, HasSubstr("unexpected keys: 'extra.weight'"));
  StateDict wrong = m.state_dict();
  for (auto& [name, t] : wrong.tensors) {
    if (name == "head.weight") t = zeros({3, 4});
  }
  const Tensor before = m.head->weight.clone();
  EXPECT_THAT(ErrorOf([&] { m.load_state_dict(wrong); }),
              HasSubstr("size mismatch for 'head.weight': the checkpoint has [3, 4], the module has [2, 4]"));
  EXPECT_TRUE(equal(m.head->weight, before));  // nothing half-loaded
  StateDict partial;
  partial.tensors.emplace_back("head.weight", ones({2, 4}));
  m.load_state_dict(partial, /*strict=*/false);
  EXPECT_TRUE(equal(m.head->weight, ones({2, 4})));
}

TEST(ModuleTest, SummaryCountsAndNamesSharing) {
  Tied m;
  const std::string s = m.summary();
  EXPECT_THAT(s, HasSubstr("Total parameters: 28"));
  EXPECT_THAT(s, HasSubstr("decoder shares parameters with encoder (the same Linear)"));
  EXPECT_THAT(s, HasSubstr("in_features=4, out_features=2, bias=false"));
}

TEST(ModuleTest, TrainEvalIsRecursiveAndDropoutObeysIt) {
  auto drop = std::make_shared<Dropout>(0.5);
  Sequential net{std::make_shared<Linear>(8, 8), drop};
  EXPECT_TRUE(drop->is_training());
  Tensor x = ones({1000, 8});
  manual_seed(0);
  Tensor y = drop->forward(x);
  const double zero_fraction = (y == 0.0).to(kFloat64).mean().item<double>();
  EXPECT_NEAR(zero_fraction, 0.5, 0.02);
  EXPECT_NEAR(y.mean().item<double>(), 1.0, 0.05);  // survivors scaled by 1 / (1 - p)
  net.eval();
  EXPECT_FALSE(drop->is_training());
  EXPECT_TRUE(equal(drop->forward(x), x));
  EXPECT_TRUE(equal(F::dropout(x, 0.5, /*training=*/false), x));
}

TEST(ModuleTest, ZeroGradAndToDtype) {
  Linear lin(3, 2);
  lin(randn({4, 3})).sum().backward();
  ASSERT_TRUE(lin.weight.grad().defined());
  lin.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(equal(lin.weight.grad(), zeros({2, 3})));
  lin.zero_grad();
  EXPECT_FALSE(lin.weight.grad().defined());
  lin.to(kFloat64);
  EXPECT_EQ(lin.weight.dtype(), kFloat64);
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_EQ(lin(randn({1, 3}, kFloat64)).dtype(), kFloat64);
}

TEST(LinearTest, MatchesFloat64MathAndInitBounds) {
  manual_seed(3);
  Linear lin(50, 7);
  const double bound = 1.0 / std::sqrt(50.0);
  EXPECT_LE(lin.weight.abs().max().item<double>(), bound);
  EXPECT_GT(lin.weight.abs().max().item<double>(), 0.9 * bound);  // fills the range
  EXPECT_NEAR(lin.weight.std().item<double>(), bound / std::sqrt(3.0), 0.1 * bound);
  Tensor x = randn({5, 50});
  Tensor ref = x.to(kFloat64).matmul(lin.weight.to(kFloat64).t()) + lin.bias.to(kFloat64);
  EXPECT_TRUE(allclose(lin(x).to(kFloat64), ref, 1e-5, 1e-6));
  EXPECT_THAT(ErrorOf([&] { lin(randn({5, 49})); }), HasSubstr("expected input with last dim 50, got shape [5, 49]"));
}

// A Linear followed by a ReLU runs as one linear_relu op: the same values and the same
// parameter gradients, bitwise, as the layers run one by one; with batch dims too. A Linear
// subclass (its forward may differ) and a bias-free Linear keep two ops.
TEST(ContainerTest, SequentialRunsLinearThenReluAsOneOpWithTheLayersValuesAndGradients) {
  manual_seed(41);
  auto seq = std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(6, 8), std::make_shared<ReLU>(), std::make_shared<Linear>(8, 8),
      std::make_shared<ReLU>(), std::make_shared<Linear>(8, 3)});
  for (const IntArray& shape : {IntArray{5, 6}, IntArray{2, 5, 6}, IntArray{300, 6}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = randn(shape);
    const Tensor up = randn([&] {
      IntArray s = shape;
      s.back() = 3;
      return s;
    }());
    seq->zero_grad();
    const Tensor fused = (*seq)(x);
    (fused * up).sum().backward();
    std::vector<Tensor> fused_grads;
    for (const auto& p : seq->parameters()) fused_grads.push_back(p.grad().clone());
    seq->zero_grad();
    Tensor layered = x;
    for (size_t i = 0; i < seq->size(); ++i) layered = (*seq)[i]->forward(layered);
    (layered * up).sum().backward();
    EXPECT_TRUE(equal(fused, layered));
    const auto params = seq->parameters();
    ASSERT_EQ(params.size(), fused_grads.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(equal(fused_grads[i], params[i].grad())) << "parameter " << i;
  }
  Sequential two{std::make_shared<Linear>(4, 2), std::make_shared<ReLU>()};
  EXPECT_EQ(two(randn({3, 4})).grad_fn()->name(), "LinearReluBackward");

  struct Doubled : Linear {
    Doubled() : Linear(4, 2) {}
    Tensor forward(const Tensor& x) override { return Linear::forward(x) * 2; }
  };
  Sequential sub{std::make_shared<Doubled>(), std::make_shared<ReLU>()};
  const Tensor xs = randn({3, 4});
  const auto& lin = static_cast<Linear&>(*sub[0]);
  EXPECT_TRUE(allclose(sub(xs), relu(linear(xs, lin.weight, lin.bias) * 2)));
  EXPECT_EQ(sub(xs).grad_fn()->name(), "ReluBackward");
  Sequential no_bias{std::make_shared<Linear>(4, 2, false), std::make_shared<ReLU>()};
  EXPECT_EQ(no_bias(xs).grad_fn()->name(), "ReluBackward");
}

TEST(ContainerTest, SequentialNamesLayersAndReportsWhichFailed) {
  Sequential net{std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(), std::make_shared<Linear>(6, 2)};
  EXPECT_THAT(Names(net.named_parameters()), ElementsAre("0.weight", "0.bias", "2.weight", "2.bias"));
  EXPECT_THAT(ErrorOf([&] { net(randn({1, 4})); }), HasSubstr("Sequential layer 2 (Linear)"));
  ModuleList list{std::make_shared<Linear>(2, 2)};
  list.push_back(std::make_shared<Tanh>());
  EXPECT_EQ(list.size(), 2u);
  ModuleDict dict;
  dict.insert("proj", std::make_shared<Linear>(2, 3));
  EXPECT_TRUE(dict.contains("proj"));
  EXPECT_THAT(Names(dict.named_parameters()), ElementsAre("proj.weight", "proj.bias"));
  EXPECT_THROW((void)dict["nope"], IndexError);
}

}  // namespace
}  // namespace anvil::nn
