// Backward rules: one per differentiable row of the op table, all in derivatives.cc and
// written with ordinary tensor ops, so that running them with grad mode on records a graph
// of the backward itself (higher-order gradients come for free).
// Thread-safety: a BackwardCtx lives for one node's backward, on the thread running it; the rule
// table is immutable.
#pragma once

#include <vector>

#include "core/autograd/node.h"

namespace anvil::autograd {

// What a rule sees: the node's attributes, input metadata and saved tensors.
class BackwardCtx {
 public:
  explicit BackwardCtx(OpNode& node) : node_(node) {}
  const OpAttrs& attrs() const { return node_.attrs(); }
  // The row's typed arguments (core/ops/op_args.h).
  template <typename T>
  const T& args() const {
    return node_.attrs().get<T>();
  }
  const TensorMeta& input(int i) const { return node_.input_meta()[i]; }
  int num_inputs() const { return static_cast<int>(node_.input_meta().size()); }
  Tensor saved_input(int i) const { return node_.saved_input(i); }
  Tensor saved_output(int i) const { return node_.saved_output(i); }
  bool needs_input_grad(int i) const { return node_.needs_input_grad(i); }

 private:
  OpNode& node_;
};

// grads has one entry per output, never undefined (zeros are filled in for outputs that
// received no gradient). Returns one gradient per input (undefined = none).
using BackwardFn = std::vector<Tensor> (*)(BackwardCtx& ctx, const std::vector<Tensor>& grads);

// The rule of a differentiable row; throws if the table row has none.
BackwardFn backward_rule(OpId op);
// True if `op` has a rule (a test checks every differentiable row does).
bool has_backward_rule(OpId op);

// Sums a broadcast gradient back to `sizes` (the reverse of broadcasting).
Tensor sum_to(const Tensor& grad, const IntArray& sizes);

}  // namespace anvil::autograd
