// The op table's C++ face: OpId (one per row of op_table.def) and its per-row properties.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace anvil {

enum class OpId : int16_t {
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, ...) Id,
#include "core/ops/op_table.def"
#undef ANVIL_OP
  kCount
};
constexpr int kNumOps = static_cast<int>(OpId::kCount);

// Foreach: an in-place update of several tensor lists at once (fused optimizer steps); no
// outputs, no autograd.
enum class OpKind : int8_t { Unary, Binary, Ternary, Reduce, Matmul, Index, View, Fill, Foreach, Other };

// How a row's outputs are inferred and its inputs validated (ops/infer.cc switches over it with
// no default: a new family without a case does not compile).
enum class InferFamily : int8_t {
  UnaryKeep,      // same shape and dtype (bool refused where it has no meaning)
  UnaryFloat,     // same shape; integer inputs compute in float32
  UnaryFloating,  // same shape; floating inputs only (PyTorch's activations refuse integers)
  UnaryPow,       // pow(tensor, scalar): same shape, the promoted dtype
  UnaryBool,      // same shape, bool
  BinaryArith,    // broadcast shape, the common dtype
  BinaryFloat,    // broadcast shape, the common dtype; integers promote to the default float
  BinaryCompare,  // broadcast shape, bool
  BinaryLogical,  // broadcast shape, bool
  Where,
  Cast,
  Clone,
  ReduceSum,      // reduced shape, the input's dtype
  ReduceFloat,    // reduced shape, floating point
  ReduceKeep,     // reduced shape, the input's dtype, no identity: non-empty reduced dims
  ReduceIndexed,  // values and int64 indices, non-empty reduced dims
  ReduceArg,      // int64 indices, non-empty reduced dims
  ReduceBool,
  CumSum,
  Mm,
  Bmm,
  Linear,
  SoftmaxLike,
  NllLoss,
  Cat,
  IndexSelect,
  Gather,
  Scatter,
  IndexAdd,
  Index,
  IndexPut,
  Sort,
  ViewGeom,  // views: geometry from their ViewFn (ops/views.cc), never inferred here
  StridedScatter,
  Im2Col,
  Col2Im,
  MaxPoolIndices,  // int64 [N, C, OH, OW] from a floating [N, C, H, W]
  Conv2d,
  Dynamic,  // outputs sized by the kernel itself (nonzero, fills)
  Foreach,  // in place over tensor lists, no outputs
};

// What automatic mixed precision does with a row's floating-point inputs (NOTE in
// op_table.def; PyTorch's CUDA autocast op lists are the reference).
enum class AutocastPolicy : int8_t {
  LowerPrecision,  // cast to the region's lower-precision dtype (float16 / bfloat16)
  Float32,         // cast to float32: the op's accuracy needs it
  Widest,          // cast to the widest floating dtype among the inputs
  NoCast,          // run in the dtypes that came
};

// Who writes a row's kernel (NOTE in op_table.def).
enum class KernelSource : int8_t { Functor, FunctorAll, Dividing, Own, NoKernel };

// How a row is exported to ONNX (NOTE in op_table.def).
enum class ExportForm : int8_t { Node, Hook, NoExport };

// What API is generated from a row (NOTE in op_table.def).
enum class ApiForm : int8_t { FnMethodInplace, FnMethod, FnDim, Hand };

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
  InferFamily infer;
  AutocastPolicy autocast;
  uint8_t args;  // the index in OpArgs (core/ops/attrs.h) of the row's argument struct
  KernelSource kernel;
  ApiForm api;
  ExportForm export_form;
};

const OpInfo& op_info(OpId op);
inline std::string_view op_name(OpId op) { return op_info(op).name; }

}  // namespace anvil
