// The op table's columns checked against references outside it.
//
// Autocast: PyTorch's CUDA autocast op lists (the "Autocast Op Reference" of torch.amp's
// documentation, and aten/src/ATen/autocast_mode.cpp for cat/stack/index_copy), by PyTorch op
// name. Every row whose user-facing name is on a list must carry that list's policy; a row on
// no list runs as its inputs come, except the rows that are not user-facing ops (fused or
// gradient kernels), which follow the op they belong to.
//
// Export: a Node row maps to one operator of the ONNX operator set (ai.onnx, the names of its
// Operators.md), taking no arguments, since a Node carries none; a NoExport row names none.
//
// Kernels: a NoKernel row is a view, every other row has a kernel on the CPU (its slot is
// filled by the backend's kernel list).
#include "core/ops/op_table.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/backend/registry.h"
#include "core/ops/attrs.h"

namespace anvil {
namespace {

const std::set<std::string>& PyTorchLowerPrecision() {
  static const std::set<std::string> ops = {"__matmul__",
                                            "addbmm",
                                            "addmm",
                                            "addmv",
                                            "addr",
                                            "baddbmm",
                                            "bmm",
                                            "chain_matmul",
                                            "multi_dot",
                                            "conv1d",
                                            "conv2d",
                                            "conv3d",
                                            "conv_transpose1d",
                                            "conv_transpose2d",
                                            "conv_transpose3d",
                                            "GRUCell",
                                            "linear",
                                            "LSTMCell",
                                            "matmul",
                                            "mm",
                                            "mv",
                                            "prelu",
                                            "RNNCell"};
  return ops;
}

const std::set<std::string>& PyTorchFloat32() {
  static const std::set<std::string> ops = {"__pow__",
                                            "__rdiv__",
                                            "__rpow__",
                                            "__rtruediv__",
                                            "acos",
                                            "asin",
                                            "binary_cross_entropy_with_logits",
                                            "cosh",
                                            "cosine_embedding_loss",
                                            "cdist",
                                            "cosine_similarity",
                                            "cross_entropy",
                                            "cumprod",
                                            "cumsum",
                                            "dist",
                                            "erfinv",
                                            "exp",
                                            "expm1",
                                            "group_norm",
                                            "hinge_embedding_loss",
                                            "kl_div",
                                            "l1_loss",
                                            "layer_norm",
                                            "log",
                                            "log_softmax",
                                            "log10",
                                            "log1p",
                                            "log2",
                                            "margin_ranking_loss",
                                            "mse_loss",
                                            "multilabel_margin_loss",
                                            "multi_margin_loss",
                                            "nll_loss",
                                            "norm",
                                            "normalize",
                                            "pdist",
                                            "poisson_nll_loss",
                                            "pow",
                                            "prod",
                                            "reciprocal",
                                            "rsqrt",
                                            "sinh",
                                            "smooth_l1_loss",
                                            "soft_margin_loss",
                                            "softmax",
                                            "softmin",
                                            "softplus",
                                            "sum",
                                            "renorm",
                                            "tan",
                                            "triplet_margin_loss"};
  return ops;
}

const std::set<std::string>& PyTorchWidest() {
  static const std::set<std::string> ops = {"addcdiv", "addcmul",     "atan2",     "bilinear",    "cross",
                                            "dot",     "grid_sample", "index_put", "scatter_add", "tensordot",
                                            "cat",     "stack",       "index_copy"};
  return ops;
}

// Rows that are not user-facing ops: the policy of the op they are part of.
const std::map<OpId, AutocastPolicy>& KernelOnlyRows() {
  static const std::map<OpId, AutocastPolicy> rows = {
      {OpId::LinearRelu, AutocastPolicy::LowerPrecision},  // linear, then relu in its epilogue
  };
  return rows;
}

const char* PolicyName(AutocastPolicy p) {
  switch (p) {
    case AutocastPolicy::LowerPrecision:
      return "LowerPrecision";
    case AutocastPolicy::Float32:
      return "Float32";
    case AutocastPolicy::Widest:
      return "Widest";
    case AutocastPolicy::NoCast:
      return "NoCast";
  }
  return "?";
}

TEST(OpTable, AutocastPoliciesFollowPyTorchsLists) {
  int on_a_list = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    const std::string name(info.name);
    AutocastPolicy expected = AutocastPolicy::NoCast;
    if (PyTorchLowerPrecision().count(name)) expected = AutocastPolicy::LowerPrecision;
    if (PyTorchFloat32().count(name)) expected = AutocastPolicy::Float32;
    if (PyTorchWidest().count(name)) expected = AutocastPolicy::Widest;
    if (expected != AutocastPolicy::NoCast) ++on_a_list;
    if (auto it = KernelOnlyRows().find(info.id); it != KernelOnlyRows().end()) expected = it->second;
    EXPECT_EQ(PolicyName(info.autocast), std::string(PolicyName(expected))) << "row " << name;
  }
  EXPECT_GE(on_a_list, 20);  // the lists match the table's names (a renamed row would drop out)
}

TEST(OpTable, GradientAndBackwardRowsDoNotAutocast) {
  // They run in the dtypes their forward chose; casting them again would change the gradient's dtype.
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    const std::string name(info.name);
    const bool backward_row = name.find("_backward") != std::string::npos || name.find("_grad") != std::string::npos;
    if (backward_row) {
      EXPECT_EQ(PolicyName(info.autocast), std::string("NoCast")) << "row " << name;
    }
  }
}

TEST(OpTable, ExportColumnAgreesWithTheOnnxColumn) {
  int nodes = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    const std::string name(info.name), onnx(info.onnx);
    switch (info.export_form) {
      case ExportForm::Node:
        ++nodes;
        // That it is an operator of ai.onnx, ONNX's own schema registry says
        // (OnnxTable.EveryNodeRowExportsAsItsOperatorImportsBackAndMatchesOnnxRuntime).
        EXPECT_FALSE(onnx.empty()) << "row " << name << ": Node needs an ONNX operator";
        EXPECT_EQ(info.args, op_args_index<NoArgs>()) << "row " << name << ": a Node row carries no arguments";
        break;
      case ExportForm::Hook:
        break;
      case ExportForm::NoExport:
        EXPECT_EQ(onnx, "") << "row " << name << " is NoExport but names an ONNX operator";
        break;
    }
  }
  EXPECT_GE(nodes, 30);
}

TEST(OpTable, EveryRowButTheViewsHasACpuKernel) {
  Backend& cpu = backend_for(kCPU);
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    const bool view = info.kind == OpKind::View;
    EXPECT_EQ(info.kernel == KernelSource::NoKernel, view) << "row " << info.name << ": NoKernel is for the views";
    EXPECT_EQ(cpu.kernel(info.id) != nullptr, !view) << "row " << info.name;
  }
}

}  // namespace
}  // namespace anvil
