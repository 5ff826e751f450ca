#include "core/ops/op_table.h"

#include <cstdlib>

#include "core/ops/attrs.h"
#include "core/util/error.h"

namespace anvil {
namespace {

constexpr bool Yes = true;
constexpr bool No = false;

constexpr OpInfo kOps[] = {
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, onnx, export_form) \
  {OpId::Id,                                                                                               \
   #name,                                                                                                  \
   OpKind::kind,                                                                                           \
   outs,                                                                                                   \
   grad,                                                                                                   \
   static_cast<uint32_t>(saves),                                                                           \
   onnx,                                                                                                   \
   InferFamily::infer,                                                                                     \
   AutocastPolicy::autocast,                                                                               \
   static_cast<uint8_t>(op_args_index<args>()),                                                            \
   KernelSource::kernel,                                                                                   \
   ApiForm::api,                                                                                           \
   ExportForm::export_form},
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

std::string_view op_args_name(size_t index) {
  static constexpr std::string_view kNames[] = {
#define ANVIL_ARGS_NAME(T) #T,
      ANVIL_OP_ARGS(ANVIL_ARGS_NAME)
#undef ANVIL_ARGS_NAME
  };
  return index < std::size(kNames) ? kNames[index] : std::string_view("an unknown argument struct");
}

void throw_wrong_op_args(size_t wanted, size_t held) {
  ANVIL_INTERNAL_ASSERT(wanted == held, "op arguments: wanted ", op_args_name(wanted), ", the call passed ",
                        op_args_name(held));
  std::abort();  // unreachable: the assertion above throws
}

}  // namespace anvil
