// Lowering: a captured Trace (op rows and composites) into ONNX nodes, still free of protobuf.
// Each row of the op table lowers by its Export column: a Node row to one node of its ONNX
// operator; a Hook row by its function in lower.cc (attributes from its Args struct, or
// several nodes). A row or composite without a lowering is refused by name.
//
// Sizes never become attributes: every size a node takes (a Reshape's target, a Slice's
// bounds, an Expand's shape) is a kShape value, so the writer can tell, by comparing traces
// made at different batch sizes, which entries are symbolic and compute them in the graph.
#pragma once

#include <string>
#include <vector>

#include "core/export/capture.h"

namespace anvil::onnx {

using exporter::Attributes;
using exporter::AttrValue;

struct LValue {
  enum Kind : int8_t { kInput, kConstant, kShape, kComputed };
  Kind kind = kComputed;
  IntArray sizes;  // inputs, outputs and constants (intermediates: left to shape inference)
  ScalarType dtype = kFloat32;
  Tensor constant;    // kConstant
  std::string name;   // inputs; constants a module owns (dotted name)
  std::string maker;  // constants: the op that first read them; shape arguments: their op
  // kShape: a 1-D int64 argument. Entries may be rewritten by the writer: -1 for the one
  // symbolic entry of a Reshape target; an Expand target's entries equal to its input's dim
  // become 1; a Slice bound that tracks its input's size becomes relative to the end.
  enum ShapeUse : int8_t { kPlain, kReshapeTarget, kExpandTarget, kSliceBound, kIndex };
  IntArray shape;
  ShapeUse use = kPlain;
  int like = -1;       // kExpandTarget, kSliceBound, kIndex: the value whose dims the entries relate to
  IntArray like_dims;  // kSliceBound, kIndex: per entry, the dim of `like` it indexes
};

struct LNode {
  std::string op;
  Attributes attrs;
  std::vector<int> inputs;  // -1: an absent optional input
  std::vector<int> outputs;
  std::string origin;  // the row or composite it came from (messages)
};

struct Lowered {
  std::vector<LValue> values;  // the trace's values first, same ids
  std::vector<LNode> nodes;
  std::vector<int> inputs, outputs;
};

// ONNX's TensorProto::DataType for an Anvil dtype (the Cast attribute, initializers, value info).
int32_t onnx_dtype(ScalarType t);

// Lowers `trace` for ONNX opset `opset` (13..17). Throws exporter::CaptureError naming a row
// or composite that has no lowering.
Lowered lower(const exporter::Trace& trace, int64_t opset);

}  // namespace anvil::onnx
