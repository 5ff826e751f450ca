// The dispatcher: every primitive op call goes through here. It validates inputs and infers
// output shapes/dtypes (by the row's Infer column), allocates outputs, runs the kernel of
// the inputs' device, and records the autograd node.
#pragma once

#include <vector>

#include "core/ops/attrs.h"
#include "core/ops/op_table.h"
#include "core/tensor/tensor.h"

namespace anvil {

struct TensorSpec {
  IntArray sizes;
  ScalarType dtype;
};

// Runs `op` out of place and returns its outputs.
std::vector<Tensor> dispatch(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs);
inline Tensor dispatch1(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs) {
  return dispatch(op, inputs, attrs)[0];
}

// The inputs as dispatch() will run them: inside an autocast region, cast by `op`'s row policy
// (core/amp/autocast.h), else unchanged. Wrappers that check their inputs before dispatching
// check these, as PyTorch's autocast dispatch key runs before its ops' checks: a bfloat16
// activation meeting a float32 weight is autocast's normal case, not a dtype mismatch. The
// casts are not repeated: dispatch() finds them done.
std::vector<Tensor> autocast_inputs(OpId op, std::vector<Tensor> inputs);

// Runs a Foreach row (inputs updated in place, no outputs, no autograd) on the inputs' device.
// Callers (ops/foreach.cc) validate the lists and bump versions.
void dispatch_foreach(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs);

// Runs `op`'s kernel writing into `self` (inputs[0] is self), with no autograd recording.
// Callers go through inplace_op, which handles autograd.
void dispatch_into(OpId op, const std::vector<Tensor>& inputs, Tensor& out, const OpAttrs& attrs);

// An in-place op `self.op_(others...)`: checks that self may be written (not a leaf that
// requires grad, no internal overlap, the result fits self's shape and dtype), then either
// runs the kernel into self (no history needed) or computes out of place and copies into
// self with history (rebasing a view's base: NOTE [ View tracking ]). Bumps the version.
Tensor& inplace_op(OpId op, Tensor& self, const std::vector<Tensor>& others, const OpAttrs& attrs, const char* name);

// Checks that `attrs` holds the argument struct of `op`'s row (or nothing: the row's defaults).
void check_op_args(OpId op, const OpAttrs& attrs);

// A unary row's call as users make it: an integer input of a float-valued row (Infer
// UnaryFloat) computes in the default float dtype; bool is refused where it has no meaning.
Tensor unary_op(OpId op, const Tensor& x, const OpAttrs& attrs = {});
// A binary element-wise row's call as users make it: both operands promoted to their result
// type (PyTorch's result_type; BinaryFloat rows compute integers in the default float dtype),
// bool subtraction refused. The dispatcher itself takes operands of one dtype.
Tensor binary_op(OpId op, const Tensor& a, const Tensor& b, const OpAttrs& attrs = {});

// Shape/dtype inference for a row (exposed for tests).
std::vector<TensorSpec> infer_specs(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs);

// Checks that an in-place write into `self` is allowed (leaf/overlap rules).
void check_inplace_allowed(const Tensor& self, const char* name);

// Makes a view of `input` by `fn` (View rows), sharing storage and recording history.
Tensor make_view(OpId op, const Tensor& input, const ViewFn& fn);

// Writes `src` into `self` (broadcast, dtype-converting) with autograd; `name` is recorded
// as the in-place writer.
Tensor& copy_into(Tensor& self, const Tensor& src, const char* name);

}  // namespace anvil
