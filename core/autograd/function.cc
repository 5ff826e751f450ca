#include "core/autograd/function.h"

#include "core/ops/functions.h"

namespace anvil::autograd {

void AutogradContext::save_for_backward(const std::vector<Tensor>& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t, false);
}

std::vector<Tensor> AutogradContext::get_saved_variables() const {
  std::vector<Tensor> out;
  auto node = node_.lock();
  for (const SavedVariable& s : saved_) out.push_back(s.unpack(node));
  return out;
}

void AutogradContext::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  for (const Tensor& t : outputs) non_differentiable_.push_back(t.impl());
}

std::vector<Tensor> CustomNode::apply(std::vector<Tensor>&& grads) {
  std::vector<Tensor> by_arg = fn_(&ctx, std::move(grads));
  std::vector<Tensor> out(next_edges_.size());
  size_t tensor_args = 0;
  for (int m : arg_to_edge_) tensor_args += m >= 0;
  ANVIL_CHECK(by_arg.size() == arg_to_edge_.size() || by_arg.size() == tensor_args, name(), ": backward returned ",
              by_arg.size(), " gradients, expected one per forward argument (", arg_to_edge_.size(), ")");
  const bool per_tensor = by_arg.size() == tensor_args && by_arg.size() != arg_to_edge_.size();
  for (size_t a = 0, t = 0; a < arg_to_edge_.size(); ++a) {
    const int e = arg_to_edge_[a];
    if (e < 0) continue;
    const Tensor& g = per_tensor ? by_arg[t] : by_arg[a];
    ++t;
    if (g.defined()) {
      const TensorMeta& m = arg_meta_[e];
      ANVIL_CHECK(g.sizes() == m.sizes, name(), ": backward returned a gradient of shape ", shape_str(g.sizes()),
                  " for input ", e, " of shape ", shape_str(m.sizes));
    }
    out[e] = g;
  }
  return out;
}

void CustomNode::release_variables() {
  for (auto& s : ctx.saved_) s.reset();
}

namespace detail {
void WireCustomNode(const std::shared_ptr<CustomNode>& node, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs) {
  if (!GradMode::is_enabled() || !any_requires_grad(inputs)) return;
  for (const Tensor& t : inputs) {
    node->mutable_next_edges().push_back(gradient_edge(t));
    node->arg_meta_.emplace_back(t);
  }
  for (Tensor& o : outputs) node->output_meta_.emplace_back(o);
  std::vector<Tensor> differentiable;
  for (size_t i = 0; i < outputs.size(); ++i) {
    bool nd = false;
    for (const TensorImpl* p : node->ctx.non_differentiable_) nd |= p == outputs[i].impl();
    if (nd) continue;
    // Outputs aliasing an input get their own handle so the input's history is untouched.
    for (const Tensor& in : inputs) {
      if (outputs[i].impl() == in.impl()) outputs[i] = outputs[i].detach();
    }
    auto& meta = outputs[i].impl()->autograd_mut();
    if (!outputs[i].is_floating_point()) continue;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}
}  // namespace detail

}  // namespace anvil::autograd
