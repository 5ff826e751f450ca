// One name for one tensor: a model's input and output are called the same in GetModel, in
// Predict's request and reply, in KServe's metadata and in its ONNX export; an imported ONNX
// model keeps its graph's names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/anvil.h"
#include "core/nn/linear.h"
#include "core/onnx/export.h"
#include "core/onnx/import.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "server/wire_tensor.h"
#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

using ::testing::HasSubstr;

class SignatureTest : public ServerFixture {
 protected:
  v1::Model Describe(const std::string& name) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name(name);
    v1::Model m;
    EXPECT_TRUE(serving_->GetModel(&ctx, req, &m).ok());
    return m;
  }
};

TEST_F(SignatureTest, ATrainedModelsExportNamesItsOutputAsPredictDoes) {
  Stream(Submit(BlobsSpec(1)).id());
  const v1::Model m = Describe("blobs-mlp");
  ASSERT_EQ(m.inputs_size(), 1);
  ASSERT_EQ(m.outputs_size(), 1);
  v1::PredictResponse resp;
  ASSERT_TRUE(Predict(PredictOf("blobs-mlp", randn({3, 2})), &resp).ok());
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs(0).name(), m.outputs(0).name());

  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  const std::string file = Export("blobs-mlp", v1::ONNX, &st, &sha, &total);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const onnx::ImportedModel graph = onnx::import_model(file);
  EXPECT_EQ(graph.input.name, m.inputs(0).name());
  EXPECT_EQ(graph.output_name, m.outputs(0).name());
}

TEST_F(SignatureTest, AnImportedGraphIsServedUnderItsOwnNames) {
  manual_seed(3);
  nn::Linear layer(2, 3);
  layer.eval();
  onnx::ExportOptions options;
  options.output_names = {"scores"};
  const std::string file = onnx::export_model(layer, {{"pixels", {2}, kFloat32}}, options);
  v1::Model model;
  const grpc::Status registered = RegisterModel("named", file, &model);
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  ASSERT_EQ(model.inputs_size(), 1);
  EXPECT_EQ(model.inputs(0).name(), "pixels");
  EXPECT_EQ(model.outputs(0).name(), "scores");

  const Tensor x = randn({4, 2});
  v1::PredictRequest req;
  req.set_model("named");
  encode_tensor(x, "pixels", req.add_inputs());
  v1::PredictResponse resp;
  const grpc::Status ok = Predict(req, &resp);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(resp.outputs(0).name(), "scores");
  EXPECT_TRUE(allclose(decode_tensor(resp.outputs(0)), layer.forward(x), 1e-5, 1e-6));
  // An unnamed input is the model's one input; another name is refused, naming the right one.
  req.mutable_inputs(0)->clear_name();
  EXPECT_TRUE(Predict(req, &resp).ok());
  req.mutable_inputs(0)->set_name("input");
  const grpc::Status wrong = Predict(req, &resp);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(wrong.error_message(), HasSubstr("has no input named \"input\" (it has: pixels)"));
}

}  // namespace
}  // namespace anvil::server
