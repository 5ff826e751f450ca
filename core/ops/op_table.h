// The op table's C++ face: OpId (one per row of op_table.def) and its per-row properties.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace anvil {

enum class OpId : int16_t {
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, onnx) Id,
#include "core/ops/op_table.def"
#undef ANVIL_OP
  kCount
};
constexpr int kNumOps = static_cast<int>(OpId::kCount);

// Foreach: an in-place update of several tensor lists at once (fused optimizer steps); no
// outputs, no autograd.
enum class OpKind : int8_t { Unary, Binary, Ternary, Reduce, Matmul, Index, View, Fill, Foreach, Other };

// What backward needs (NOTE in op_table.def).
enum SaveMask : uint32_t { I0 = 1, I1 = 2, I2 = 4, IR = 8, IA = 16, O0 = 32, O1 = 64 };

struct OpInfo {
  OpId id;
  std::string_view name;
  OpKind kind;
  int num_outputs;
  bool differentiable;
  uint32_t saves;
  std::string_view onnx;
  std::string_view infer;  // inference family ("UnaryFloat": integer inputs compute in float32)
};

const OpInfo& op_info(OpId op);
inline std::string_view op_name(OpId op) { return op_info(op).name; }

}  // namespace anvil
