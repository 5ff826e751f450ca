// QDQ fusion at import: the int8 layers hidden in a quantized ONNX graph, found by pattern and
// run by Anvil's int8 kernels instead of in float.
//
// A QDQ graph (what Anvil's export writes for an int8 model, and what onnxruntime's quantizer
// writes) keeps float operators between QuantizeLinear / DequantizeLinear pairs; run as
// written, every int8 layer costs a float layer plus the rounding around it. Like
// onnxruntime's QDQ transformers, the importer recognises each group
//
//   DequantizeLinear(x: uint8, s_x, zp_x) ─┐
//   DequantizeLinear(W: int8 initializer, s_w, 0) ──> Conv | Gemm | MatMul [-> Add bias]
//   [DequantizeLinear(b: int32, s_x * s_w)] ─┘        [-> Relu] -> QuantizeLinear(s_y, zp_y)
//                                                                -> DequantizeLinear(s_y, zp_y)
//
// and replaces it by one QuantizedConv2d or QuantizedLinear (core/quant/quantized_layers.h)
// that reads the value on x's grid and writes the last DequantizeLinear's output. The layer
// quantizes that input back to exactly its integers, accumulates them exactly in int32, and
// requantizes with fbgemm's formulas: a graph Anvil exported from an int8 model computes that
// model's bits again; any other QDQ graph computes within one output step of its float
// reading (the float graph rounds its sums; so does onnxruntime's QLinearConv, differently).
//
// The dynamic form (Anvil's export of a dynamic Linear, onnxruntime's dynamic quantizer,
// quantize_onnx_dynamic) is a group too:
//
//   DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W: int8 [in, out] initializer, x_zp[, 0])
//   -> Cast(FLOAT) -> Mul(·, Mul(x_scale, w_scale constant)) [-> Add(bias constant)]
//
// replaced by a DynamicQuantizedLinear with ONNX's activation formula
// (DynamicActivations::kOnnx), reading x in float32: the graph's bits, on the int8 kernels.
//
// What is not fused runs as written: activations that are int8 rather than uint8, weights
// with a nonzero zero point or channels on another axis, grouped or 1-D/3-D convolutions,
// Gemm with alpha/beta/transA, and any value of the group that another node also reads.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "onnx/onnx_pb.h"

namespace anvil::onnx {

struct FusedQdqLayer {
  std::vector<int> nodes;  // the graph's nodes it replaces (indices); the last one writes `output`
  std::string input;       // the value it reads: a DequantizeLinear's output on x's quint8 grid (static),
                           // or the float x a DynamicQuantizeLinear reads (dynamic)
  std::string output;      // the value it writes: the group's last node's output
  std::shared_ptr<nn::Module> layer;
  std::string description;  // `Conv "conv1" -> QuantizedConv2d (relu, per channel)`
};

// The constant behind a value name (an initializer, or a Constant node's output), or an
// undefined tensor when the value is computed.
using ConstantLookup = std::function<Tensor(const std::string&)>;

// Every group of `graph` that one int8 layer computes, in node order; groups never share a
// node, and a graph output is never a value inside a group.
std::vector<FusedQdqLayer> find_qdq_layers(const ::onnx::GraphProto& graph, const ConstantLookup& constant);

}  // namespace anvil::onnx
