#include "core/autograd/node.h"

#include <atomic>
#include <sstream>

#include "core/autograd/derivatives.h"
#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

std::string PascalName(std::string_view op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}
}  // namespace

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

// ---- SavedVariable ----

SavedVariable::SavedVariable(const Tensor& t, bool is_output)
    : saved_version_(t.defined() ? t._version() : 0), is_output_(is_output) {
  if (!t.defined()) return;
  if (is_output) {
    // Drop the grad_fn (it is the saving node: keeping it would be a cycle).
    data_ = t.detach();
    output_nr_ = t.output_nr();
    requires_grad_ = t.requires_grad();
  } else {
    data_ = t;
  }
}

Tensor SavedVariable::unpack(const std::shared_ptr<Node>& owner) const {
  if (released_) {
    throw Error(
        "Trying to backward through the graph a second time (or directly access saved "
        "tensors after they have already been freed). Saved intermediate values of the graph "
        "are freed when you call backward() or autograd::grad(). Specify retain_graph=true "
        "if you need to backward through the graph a second time or to access saved tensors "
        "after calling backward.");
  }
  if (!data_.defined()) return Tensor();
  const uint64_t now = data_._version();
  if (now != saved_version_) {
    const char* writer = data_.storage()->last_writer();
    std::ostringstream os;
    os << "one of the variables needed for gradient computation has been modified by an "
          "inplace operation: ["
       << data_.dtype() << " " << shape_str(data_.sizes()) << "]" << (is_output_ ? ", output " : ", input ") << "of "
       << owner->name() << ", is at version " << now << "; expected version " << saved_version_
       << " instead. It was saved by " << owner->name() << " and last modified by "
       << (writer ? writer : "an in-place op")
       << ". Hint: clone() the tensor before modifying it in place, or use the "
          "out-of-place form of the op.";
    throw Error(os.str());
  }
  if (!is_output_ || !requires_grad_) return data_;
  // Re-attach history so higher-order gradients flow back through `owner`.
  Tensor t = data_.detach();
  auto& meta = t.impl()->autograd_mut();
  meta.grad_fn = owner;
  meta.output_nr = output_nr_;
  return t;
}

// ---- OpNode ----

OpNode::OpNode(OpId op, const OpAttrs& attrs, const std::vector<Tensor>& inputs) : op_(op), attrs_(attrs) {
  input_meta_.reserve(inputs.size());
  next_edges_.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    input_meta_.emplace_back(t);
    next_edges_.push_back(gradient_edge(t));
  }
}

void OpNode::save(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  const uint32_t saves = op_info(op_).saves;
  saved_inputs_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool want = (saves & IA) || (i == 0 && (saves & I0)) || (i == 1 && (saves & I1)) ||
                      (i == 2 && (saves & I2)) || (i > 0 && (saves & IR));
    if (want) saved_inputs_[i] = SavedVariable(inputs[i], false);
  }
  saved_outputs_.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if ((i == 0 && (saves & O0)) || (i == 1 && (saves & O1))) {
      saved_outputs_[i] = SavedVariable(outputs[i], true);
    }
  }
}

Tensor OpNode::saved_input(int i) {
  ANVIL_INTERNAL_ASSERT(i < static_cast<int>(saved_inputs_.size()), "input ", i, " of ", name(), " was not saved");
  return saved_inputs_[i].unpack(shared_from_this());
}

Tensor OpNode::saved_output(int i) {
  ANVIL_INTERNAL_ASSERT(i < static_cast<int>(saved_outputs_.size()), "output ", i, " of ", name(), " was not saved");
  return saved_outputs_[i].unpack(shared_from_this());
}

std::string OpNode::name() const { return PascalName(op_info(op_).name) + "Backward"; }

void OpNode::release_variables() {
  released_ = true;
  for (auto& s : saved_inputs_) s.reset();
  for (auto& s : saved_outputs_) s.reset();
}

std::vector<Tensor> OpNode::apply(std::vector<Tensor>&& grads) {
  if (released_ && (!saved_inputs_.empty() || !saved_outputs_.empty())) {
    // Unpacking a released variable raises PyTorch's "backward a second time" error.
    for (auto& s : saved_inputs_) s.unpack(shared_from_this());
    for (auto& s : saved_outputs_) s.unpack(shared_from_this());
  }
  BackwardCtx ctx(*this);
  std::vector<Tensor> result = backward_rule(op_)(ctx, grads);
  ANVIL_INTERNAL_ASSERT(result.size() == next_edges_.size(), name(), " returned ", result.size(), " gradients for ",
                        next_edges_.size(), " inputs");
  return result;
}

// ---- AccumulateGrad ----

TensorMeta AccumulateGrad::output_meta(int) const { return TensorMeta(Tensor(leaf_)); }

namespace {

// `g` as a tensor .grad may own, when no other tensor can reach its memory; undefined if some
// can. It must be the only handle on its buffer, and a whole, dense buffer, so that in-place
// updates of .grad never reach another tensor. A view qualifies when its root base is held by
// nothing but the view itself (a transposed product, Linear's weight gradient, arrives so): it
// is re-wrapped as a plain tensor over the same memory.
Tensor SoleOwnedGradient(const Tensor& g, const Tensor& leaf) {
  if (GradMode::is_enabled() || g.requires_grad() || g.impl_ptr().use_count() != 1) return {};
  if (!g.is_contiguous() || g.storage_offset() != 0 || static_cast<size_t>(g.nbytes()) != g.storage()->nbytes() ||
      g.dtype() != leaf.dtype() || g.device() != leaf.device()) {
    return {};
  }
  if (!g.is_view()) return g.storage().use_count() == 1 ? g : Tensor();
  const std::shared_ptr<TensorImpl>& base = g.impl()->view_info()->base;
  if (base.use_count() != 1 || base->storage() != g.storage() || g.storage().use_count() != 2) return {};
  return Tensor(std::make_shared<TensorImpl>(g.storage(), g.sizes(), g.strides(), 0, g.dtype()));
}

}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  Tensor leaf(leaf_);
  AutogradMeta& meta = leaf_->autograd_mut();
  for (auto& hook : meta.leaf_hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  if (!meta.grad) {
    // Own the gradient: never alias a tensor the caller may modify later. A gradient that
    // nothing else references — the usual case, a fresh result of the backward pass — is
    // taken as it is (PyTorch's AccumulateGrad steals it too), saving a copy per parameter
    // per step. See SoleOwnedGradient.
    Tensor own = SoleOwnedGradient(g, leaf);
    if (!own.defined()) own = GradMode::is_enabled() ? g.clone() : g.detach().clone();
    meta.grad = own.impl_ptr();
  } else if (GradMode::is_enabled()) {
    meta.grad = (Tensor(meta.grad) + g).impl_ptr();  // create_graph: keep history
  } else {
    Tensor acc(meta.grad);
    acc.add_(g);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

// ---- helpers ----

bool any_requires_grad(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  auto fn = t.grad_fn();  // regenerates a stale view history (NOTE [ View tracking ])
  if (fn) return {fn, t.output_nr()};
  AutogradMeta* meta = t.impl()->autograd();
  if (meta == nullptr || !meta->requires_grad) return {};
  // Two threads may record ops on the same leaf: create its accumulator once. The lock guards
  // every leaf's AutogradMeta::grad_accumulator (read and set only here), which no annotation
  // can tie to a function-local mutex.
  static Mutex mu;
  MutexLock lock(&mu);
  auto acc = meta->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    t.impl()->autograd_mut().grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(std::vector<Tensor>& outputs, const std::shared_ptr<Node>& node) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.defined() || !is_floating_point(out.dtype())) continue;
    auto& meta = out.impl()->autograd_mut();
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

void record_op(OpId op, const OpAttrs& attrs, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  const OpInfo& info = op_info(op);
  if (!info.differentiable || !GradMode::is_enabled() || !any_requires_grad(inputs)) return;
  auto node = std::make_shared<OpNode>(op, attrs, inputs);
  node->output_meta_.reserve(outputs.size());
  for (const Tensor& o : outputs) node->output_meta_.emplace_back(o);
  set_history(outputs, node);  // before save: saved outputs remember that they have history
  node->save(inputs, outputs);
  if (AnomalyMode::is_enabled()) {
    node->forward_context = detail::StrCat("forward op '", info.name, "' on inputs ",
                                           inputs.empty() ? std::string("()") : shape_str(inputs[0].sizes()));
  }
}

}  // namespace anvil::autograd
