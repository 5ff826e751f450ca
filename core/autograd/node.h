// The autograd graph. Each differentiable op run with grad mode on creates a Node holding
// what its backward needs; edges point from a node to the nodes that produced its inputs
// (or to AccumulateGrad for leaves). The graph is built as the forward code runs
// (define-by-run), so C++ control flow is simply whatever ran.
//
// Ownership: a result tensor owns its grad_fn; a node owns its next nodes (edges) and its
// saved tensors. Saved *outputs* are stored without their grad_fn to avoid a reference
// cycle, and re-attached to this node when unpacked (like PyTorch's SavedVariable).
//
// Thread-safety: threads may record ops on graphs that share leaves (a leaf's AccumulateGrad
// is created once, under a lock); a graph's backward runs on one thread at a time (engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/attrs.h"
#include "core/ops/op_table.h"
#include "core/tensor/tensor.h"

namespace anvil::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// Shape/dtype/device of a tensor, kept so backward can build zeros and sum broadcast grads
// without keeping the tensor alive.
struct TensorMeta {
  IntArray sizes;
  ScalarType dtype = kFloat32;
  Device device;
  explicit TensorMeta(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()), device(t.device()) {}
  TensorMeta() = default;
};

// A tensor saved for backward, with the storage version it had when saved.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  // Returns the saved tensor; throws the in-place modification error if its storage was
  // written since. `owner` is the node that saved it (for the message and, for outputs,
  // to re-attach the history).
  Tensor unpack(const std::shared_ptr<Node>& owner) const;
  void reset() {
    if (data_.defined()) released_ = true;
    data_ = Tensor();
  }
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;
  uint64_t saved_version_ = 0;
  bool is_output_ = false;
  uint32_t output_nr_ = 0;
  bool requires_grad_ = false;
  bool released_ = false;
};

using GradHook = std::function<Tensor(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads[i] is the gradient w.r.t. this node's i-th output; returns one gradient per
  // next edge (undefined = no gradient).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_variables() {}
  virtual int num_outputs() const { return 1; }
  // Output metadata, used to materialise zeros for outputs that got no gradient.
  virtual TensorMeta output_meta(int i) const = 0;

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  void add_pre_hook(uint32_t output_nr, GradHook hook) { pre_hooks_.push_back({output_nr, std::move(hook)}); }
  std::vector<std::pair<uint32_t, GradHook>>& pre_hooks() { return pre_hooks_; }
  // Anomaly mode: a description of where the forward op ran.
  std::string forward_context;

 protected:
  std::vector<Edge> next_edges_;

 private:
  uint64_t sequence_nr_;
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks_;
};

// The node of one op-table row.
class OpNode final : public Node {
 public:
  OpNode(OpId op, const OpAttrs& attrs, const std::vector<Tensor>& inputs);
  void save(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override;
  void release_variables() override;
  int num_outputs() const override { return static_cast<int>(output_meta_.size()); }
  TensorMeta output_meta(int i) const override { return output_meta_[i]; }

  OpId op() const { return op_; }
  const OpAttrs& attrs() const { return attrs_; }
  const std::vector<TensorMeta>& input_meta() const { return input_meta_; }
  Tensor saved_input(int i);
  Tensor saved_output(int i);
  bool needs_input_grad(int i) const { return next_edges_[i].valid(); }
  std::vector<TensorMeta> output_meta_;

 private:
  OpId op_;
  OpAttrs attrs_;
  std::vector<TensorMeta> input_meta_;
  std::vector<SavedVariable> saved_inputs_;  // indexed by input; empty when not saved
  std::vector<SavedVariable> saved_outputs_;
  bool released_ = false;
};

// Accumulates the incoming gradient into a leaf's .grad().
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  TensorMeta output_meta(int) const override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The edge through which gradient reaches `t` (its grad_fn, or its leaf accumulator);
// invalid when t does not require grad.
Edge gradient_edge(const Tensor& t);
// Makes `outputs` results of `node` (sets grad_fn/output_nr on floating outputs).
void set_history(std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node);
bool any_requires_grad(const std::vector<Tensor>& tensors);

// Records an op-table op on the tape if grad mode is on and an input requires grad.
void record_op(OpId op, const OpAttrs& attrs, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs);

}  // namespace anvil::autograd
