// The functions and Tensor methods the op table's Api column generates (NOTE in op_table.def;
// declared in core/ops/functions.h and core/tensor/tensor.h by the same rows).
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"

namespace anvil {

#define ANVIL_API_FnMethod(Id, name)                             \
  Tensor name(const Tensor& x) { return unary_op(OpId::Id, x); } \
  Tensor Tensor::name() const { return unary_op(OpId::Id, *this); }
#define ANVIL_API_FnMethodInplace(Id, name) \
  ANVIL_API_FnMethod(Id, name) Tensor& Tensor::name##_() { return inplace_op(OpId::Id, *this, {}, {}, #name "_"); }
#define ANVIL_API_FnDim(Id, name)                                                              \
  Tensor name(const Tensor& x, int64_t dim) { return dispatch1(OpId::Id, {x}, DimArgs{dim}); } \
  Tensor Tensor::name(int64_t dim) const { return dispatch1(OpId::Id, {*this}, DimArgs{dim}); }
#include "core/ops/op_api_rows.def"

}  // namespace anvil
