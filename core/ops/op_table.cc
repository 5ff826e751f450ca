#include "core/ops/op_table.h"

namespace anvil {
namespace {

constexpr bool Yes = true;
constexpr bool No = false;

constexpr OpInfo kOps[] = {
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, onnx)                                \
  {OpId::Id, name, OpKind::kind, outs, grad, static_cast<uint32_t>(saves), onnx, InferFamily::infer, \
   AutocastPolicy::autocast},
#include "core/ops/op_table.def"
#undef ANVIL_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps, "op table and OpId disagree");

constexpr bool RowsInOrder() {
  for (int i = 0; i < kNumOps; ++i) {
    if (static_cast<int>(kOps[i].id) != i) return false;
  }
  return true;
}
static_assert(RowsInOrder(), "op table rows must follow OpId order");

}  // namespace

const OpInfo& op_info(OpId op) { return kOps[static_cast<int>(op)]; }

}  // namespace anvil
