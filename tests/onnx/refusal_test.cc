// What ONNX export refuses rather than write a graph specialised to the capture: data-dependent
// control flow, branches on symbolic sizes, sizes baked into constants, aliasing in-place
// writes, ops without an ONNX form, and models in training mode. Each refusal names the op
// and the fix.
#include <gtest/gtest.h>

#include <functional>

#include "core/anvil.h"
#include "core/nn/nn.h"
#include "core/onnx/export.h"

namespace anvil::onnx {
namespace {

class Lambda : public nn::Module {
 public:
  explicit Lambda(std::function<Tensor(const Tensor&)> f) : nn::Module("Lambda"), f_(std::move(f)) {
    register_parameter("weight", weight);
    eval();
  }
  Tensor forward(const Tensor& x) override { return f_(x) * weight; }
  Tensor weight = ones({4});

 private:
  std::function<Tensor(const Tensor&)> f_;
};

// The refusal's message, or "" when the export went through.
std::string Refusal(std::function<Tensor(const Tensor&)> f, ExportOptions options = {}) {
  Lambda m(std::move(f));
  try {
    export_model(m, {InputSignature{"input", {4}, kFloat32}}, options);
  } catch (const exporter::CaptureError& e) {
    return e.what();
  }
  return "";
}

void ExpectMentions(const std::string& message, std::initializer_list<const char*> words) {
  EXPECT_FALSE(message.empty()) << "the export was not refused";
  for (const char* w : words) EXPECT_NE(message.find(w), std::string::npos) << "'" << w << "' not in: " << message;
}

TEST(OnnxRefusal, ABranchOnAComputedValue) {
  ExpectMentions(Refusal([](const Tensor& x) { return x.sum().item<float>() > 0 ? relu(x) : x; }),
                 {"item()", "where()"});
}

TEST(OnnxRefusal, ABranchOnTheSymbolicBatch) {
  ExpectMentions(Refusal([](const Tensor& x) { return x.size(0) > 2 ? relu(x) : sigmoid(x); }),
                 {"changes with 'batch'", "branches on a size"});
  // Static batch: the same model exports.
  ExportOptions fixed;
  fixed.dynamic_batch = false;
  EXPECT_EQ(Refusal([](const Tensor& x) { return x.size(0) > 2 ? relu(x) : sigmoid(x); }, fixed), "");
}

TEST(OnnxRefusal, ASizeBakedIntoAConstant) {
  ExpectMentions(Refusal([](const Tensor& x) { return x / static_cast<double>(x.size(0)); }),
                 {"constant", "x.size(0)"});
}

TEST(OnnxRefusal, DataReadOutsideTheOps) {
  ExpectMentions(Refusal([](const Tensor& x) { return x * static_cast<double>(x.contiguous().data_ptr<float>()[0]); }),
                 {"constant", "input data"});
}

TEST(OnnxRefusal, NonzeroSizesItsOutputByTheData) {
  ExpectMentions(Refusal([](const Tensor& x) {
                   return nonzero(x).to(kFloat32).sum({1}).reshape({-1, 1});
                 }),
                 {"'nonzero'", "where()"});
}

TEST(OnnxRefusal, AnInPlaceWriteIntoAView) {
  ExpectMentions(Refusal([](const Tensor& x) {
                   Tensor y = relu(x);
                   Tensor v = y.view({-1});
                   v.add_(1.0);
                   return y;
                 }),
                 {"in-place", "shares its storage"});
  // In place on a tensor nothing else views: exported.
  EXPECT_EQ(Refusal([](const Tensor& x) {
              Tensor y = relu(x);
              y.add_(1.0);
              return y;
            }),
            "");
}

TEST(OnnxRefusal, AnOpWithoutAnOnnxForm) {
  ExpectMentions(Refusal([](const Tensor& x) { return atan2(x, x + 1.0); }), {"'atan2'"});
  ExpectMentions(Refusal([](const Tensor& x) {
                   return x.unsqueeze(2).expand({-1, 4, 4}).diagonal(0, 1, 2);
                 }),
                 {"diagonal"});
}

// Options with no ONNX form are refused by name: avg_pool2d's divisor_override, and
// embedding's max_norm (it rewrites the weight while it runs).
TEST(OnnxRefusal, AvgPoolDivisorOverrideAndEmbeddingMaxNorm) {
  ExpectMentions(
      Refusal([](const Tensor& x) {
        return nn::F::avg_pool2d(x.view({-1, 1, 2, 2}), {.kernel = {2, 2}, .divisor_override = 3}).reshape({-1, 1});
      }),
      {"divisor_override"});
  ExpectMentions(Refusal([table = randn({6, 4})](const Tensor& x) {
                   return x + nn::F::embedding(tensor(std::vector<int64_t>{1}), table, std::nullopt, 1.0);
                 }),
                 {"max_norm", "embedding_renorm_"});
}

TEST(OnnxRefusal, AModelInTrainingMode) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(4, 4));
  net->push_back(std::make_shared<nn::Dropout>(0.5));
  try {
    export_model(*net, {InputSignature{"input", {4}, kFloat32}}, {});
    FAIL() << "a model in training mode was exported";
  } catch (const exporter::CaptureError& e) {
    ExpectMentions(e.what(), {"training mode", "eval()"});
  }
  net->eval();
  EXPECT_NO_THROW(export_model(*net, {InputSignature{"input", {4}, kFloat32}}, {}));
}

TEST(OnnxRefusal, ValueReadsOutsideACaptureStillWork) {
  // The hooks cost nothing and change nothing without an active capture.
  const Tensor x = tensor({1.0f, 2.0f});
  EXPECT_EQ(x.sum().item<float>(), 3.0f);
  EXPECT_EQ(nonzero(x).size(0), 2);
}

}  // namespace
}  // namespace anvil::onnx
