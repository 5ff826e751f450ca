// Custom autograd functions, as in libtorch:
//
//   struct MulConst : anvil::autograd::Function<MulConst> {
//     static Tensor forward(AutogradContext* ctx, Tensor x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
//       return {g[0] * std::get<double>(ctx->saved_data["c"]), Tensor()};
//     }
//   };
//   Tensor y = MulConst::apply(x, 2.0);
//
// forward runs with grad mode off; backward returns one gradient per forward argument
// (undefined for non-tensor arguments or inputs that need none). Check new functions with
// gradcheck (core/autograd/gradcheck.h).
// Thread-safety: a context belongs to one node, whose forward and backward run on one thread at a
// time (node.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/util/error.h"

namespace anvil::autograd {

class CustomNode;
namespace detail {
void WireCustomNode(const std::shared_ptr<CustomNode>& node, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs);
}  // namespace detail

class AutogradContext {
 public:
  // Saves tensors for backward; they are version-checked like built-in ops' saved tensors.
  void save_for_backward(const std::vector<Tensor>& tensors);
  std::vector<Tensor> get_saved_variables() const;
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  bool needs_input_grad(size_t i) const { return i < needs_grad_.size() && needs_grad_[i]; }
  std::map<std::string, std::variant<double, int64_t, bool, std::string, Tensor>> saved_data;

 private:
  template <typename>
  friend struct Function;
  friend class CustomNode;
  friend void detail::WireCustomNode(const std::shared_ptr<CustomNode>&, const std::vector<Tensor>&,
                                     std::vector<Tensor>&);
  std::vector<SavedVariable> saved_;
  std::vector<bool> needs_grad_;
  std::vector<const TensorImpl*> non_differentiable_;
  std::weak_ptr<Node> node_;
};

// The node a custom function's outputs point to.
class CustomNode final : public Node {
 public:
  using BackwardFn = std::vector<Tensor> (*)(AutogradContext*, std::vector<Tensor>);
  CustomNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(fn) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override;
  int num_outputs() const override { return static_cast<int>(output_meta_.size()); }
  TensorMeta output_meta(int i) const override { return output_meta_[i]; }

  AutogradContext ctx;
  std::vector<TensorMeta> output_meta_;
  std::vector<int> arg_to_edge_;  // forward argument index -> edge (-1: not a tensor)
  std::vector<TensorMeta> arg_meta_;

 private:
  std::string name_;
  BackwardFn fn_;
};

namespace detail {
template <typename T>
void CollectTensorArg(std::vector<Tensor>& out, std::vector<int>& map, const T& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    map.push_back(static_cast<int>(out.size()));
    out.push_back(arg);
  } else {
    map.push_back(-1);
  }
}
void WireCustomNode(const std::shared_ptr<CustomNode>& node, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs);
}  // namespace detail

template <typename Derived>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    auto node = std::make_shared<CustomNode>(typeid(Derived).name(), &Derived::backward);
    std::vector<Tensor> tensor_args;
    (detail::CollectTensorArg(tensor_args, node->arg_to_edge_, args), ...);
    node->ctx.node_ = node;
    for (const Tensor& t : tensor_args) node->ctx.needs_grad_.push_back(t.defined() && t.requires_grad());
    using R = decltype(Derived::forward(&node->ctx, std::forward<Args>(args)...));
    R result;
    {
      NoGradGuard no_grad;
      result = Derived::forward(&node->ctx, std::forward<Args>(args)...);
    }
    std::vector<Tensor> outputs;
    if constexpr (std::is_same_v<R, Tensor>)
      outputs = {result};
    else
      outputs = result;
    detail::WireCustomNode(node, tensor_args, outputs);
    if constexpr (std::is_same_v<R, Tensor>)
      return outputs[0];
    else
      return outputs;
  }
};

}  // namespace anvil::autograd
