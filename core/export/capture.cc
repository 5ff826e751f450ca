#include "core/export/capture.h"

#include "absl/container/flat_hash_map.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/op_table.h"

namespace anvil::exporter {

std::string Node::label() const { return composite.empty() ? std::string(op_name(op)) : composite; }

namespace detail {

thread_local Capture* t_capture = nullptr;

class Capture {
 public:
  Trace trace;
  int depth = 0;  // > 0 inside a kernel or a composite: nothing is recorded

  void name_constants(const ConstantNames& names) {
    for (const auto& [name, t] : names) {
      if (t.defined()) names_.try_emplace(t.impl(), name);
    }
  }

  int add_input(const Tensor& t, const std::string& name) {
    const int id = AddValue(Value::kInput, t);
    trace.values[static_cast<size_t>(id)].name = name;
    trace.values[static_cast<size_t>(id)].from_inputs = true;
    trace.inputs.push_back(id);
    return id;
  }

  // The value `t` holds: a recorded one, or a new constant first read by `reader` (messages).
  int resolve(const Tensor& t, std::string_view reader) {
    if (!t.defined()) return -1;
    if (auto it = ids_.find(t.impl()); it != ids_.end()) return it->second;
    const int id = AddValue(Value::kConstant, t);
    Value& v = trace.values[static_cast<size_t>(id)];
    if (auto n = names_.find(t.impl()); n != names_.end()) v.name = n->second;
    v.maker = std::string(reader);
    return id;
  }

  // Whether `t` depends on the inputs (a recorded, non-constant value).
  bool computed(const Tensor& t) const {
    if (!t.defined()) return false;
    auto it = ids_.find(t.impl());
    return it != ids_.end() && trace.values[static_cast<size_t>(it->second)].kind != Value::kConstant;
  }

  bool any_computed(const std::vector<Tensor>& ts) const {
    for (const Tensor& t : ts)
      if (computed(t)) return true;
    return false;
  }
  bool from_inputs(const Tensor& t) const {
    if (!t.defined()) return false;
    auto it = ids_.find(t.impl());
    return it != ids_.end() && trace.values[static_cast<size_t>(it->second)].from_inputs;
  }
  bool any_from_inputs(const std::vector<Tensor>& ts) const {
    for (const Tensor& t : ts)
      if (from_inputs(t)) return true;
    return false;
  }

  int add_computed(const Tensor& t, bool from_inputs) {
    int id;
    // A tensor rebound by an in-place write gets a new value; its storage user count stays.
    if (auto it = ids_.find(t.impl()); it != ids_.end()) {
      id = static_cast<int>(trace.values.size());
      trace.values.push_back(MakeValue(Value::kComputed, t));
      it->second = id;
    } else {
      id = AddValue(Value::kComputed, t);
    }
    trace.values[static_cast<size_t>(id)].from_inputs = from_inputs;
    return id;
  }

  // How many recorded tensors view `t`'s storage.
  int storage_users(const Tensor& t) const {
    auto it = storage_users_.find(t.storage().get());
    return it == storage_users_.end() ? 0 : it->second;
  }
  bool recorded(const Tensor& t) const { return ids_.contains(t.impl()); }

  // A new node, built in place (a Node moved through a local trips GCC 12's
  // -Wmaybe-uninitialized on the OpAttrs variant).
  Node& add_node() { return trace.nodes.emplace_back(); }

 private:
  static Value MakeValue(Value::Kind kind, const Tensor& t) {
    Value v;
    v.kind = kind;
    v.sizes = t.sizes();
    v.dtype = t.dtype();
    v.tensor = t;
    return v;
  }
  int AddValue(Value::Kind kind, const Tensor& t) {
    const int id = static_cast<int>(trace.values.size());
    trace.values.push_back(MakeValue(kind, t));
    ids_[t.impl()] = id;
    ++storage_users_[t.storage().get()];
    return id;
  }

  // Every tensor mapped here is kept alive by trace.values, so no address is reused.
  absl::flat_hash_map<const TensorImpl*, int> ids_;
  absl::flat_hash_map<const TensorImpl*, std::string> names_;
  absl::flat_hash_map<const void*, int> storage_users_;
};

namespace {

// The capture that records this call, or nullptr (none, or inside a kernel or composite).
Capture* Recording() {
  Capture* c = t_capture;
  return c != nullptr && c->depth == 0 ? c : nullptr;
}

[[noreturn]] void Refuse(const std::string& msg) { throw CaptureError("export: " + msg); }

// Rows whose output shape depends on their input's values.
bool ReadsValues(OpId op) { return op == OpId::Nonzero; }

}  // namespace

void on_op(OpId op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const OpAttrs& attrs) {
  Capture* c = Recording();
  if (c == nullptr) return;
  const OpInfo& info = op_info(op);
  // Ops on constants are folded (their outputs become constants where read), except views:
  // a window of a parameter may follow a symbolic size (positions narrowed to the sequence).
  if (!c->any_computed(inputs) && info.kind != OpKind::View) return;
  const bool from_inputs = c->any_from_inputs(inputs);
  if (ReadsValues(op) && from_inputs) {
    Refuse(
        anvil::detail::StrCat("'", info.name,
                              "' reads the values of a tensor computed from the model's inputs: its output shape "
                              "depends on the data, which an exported graph cannot capture (use a mask and where(), or "
                              "keep this step outside the model)"));
  }
  if (info.export_form == ExportForm::NoExport) {
    Refuse(anvil::detail::StrCat("'", info.name,
                                 "' has no exported form (a gradient, an optimizer step or a training-only op)"));
  }
  std::vector<int> in, out;
  for (const Tensor& t : inputs) in.push_back(c->resolve(t, info.name));
  for (const Tensor& t : outputs) out.push_back(c->add_computed(t, from_inputs));
  Node& node = c->add_node();
  node.op = op;
  node.attrs = attrs;
  node.inputs = std::move(in);
  node.outputs = std::move(out);
}

void on_inplace(OpId op, const std::vector<Tensor>& inputs, const Tensor& out, const OpAttrs& attrs) {
  Capture* c = Recording();
  if (c == nullptr) return;
  const bool out_recorded = c->recorded(out);
  if (!c->any_computed(inputs)) {
    // A write of constants: the destination becomes a constant unless it is recorded.
    if (c->computed(out)) {
      Refuse(anvil::detail::StrCat(
          "an in-place '", op_name(op),
          "' overwrites a tensor computed from the inputs with constants; use an out-of-place op"));
    }
    return;
  }
  const int users = c->storage_users(out);
  if (users > (out_recorded ? 1 : 0)) {
    Refuse(anvil::detail::StrCat("an in-place '", op_name(op), "' writes into a tensor of shape ",
                                 shape_str(out.sizes()),
                                 " that shares its storage with another tensor of the graph (a view or its base); an "
                                 "exported graph has no aliasing: use the out-of-place op (e.g. relu() for relu_())"));
  }
  std::vector<int> in;
  {
    // The destination's old value is read by the node when it is an input; an unrecorded one
    // becomes a constant of its current contents (copied: the kernel is about to overwrite it).
    ++c->depth;
    struct Leave {
      Capture* c;
      ~Leave() { --c->depth; }
    } leave{c};
    for (const Tensor& t : inputs) {
      in.push_back(c->resolve(t.impl() == out.impl() && !out_recorded ? t.clone() : t, op_name(op)));
    }
  }
  const int result = c->add_computed(out, c->any_from_inputs(inputs));
  Node& node = c->add_node();
  node.op = op;
  node.attrs = attrs;
  node.inputs = std::move(in);
  node.outputs = {result};
}

void on_value_read(const Tensor& t, const char* what) {
  Capture* c = Recording();
  if (c == nullptr || !c->from_inputs(t)) return;
  Refuse(anvil::detail::StrCat(what, " reads the value of a tensor computed from the model's inputs (shape ",
                               shape_str(t.sizes()),
                               "): an exported graph cannot branch on or size itself by data. Compute both branches "
                               "and select with where(), or move the decision out of the model"));
}

KernelScope::KernelScope() : capture_(t_capture) {
  if (capture_ != nullptr) ++capture_->depth;
}
KernelScope::~KernelScope() {
  if (capture_ != nullptr) --capture_->depth;
}

}  // namespace detail

bool capturing() { return detail::Recording() != nullptr; }

struct Composite::State {
  detail::Capture* capture;
  std::string op;
  std::vector<Tensor> inputs;
  Attributes attrs;
  bool open = true;
};

Composite::Composite(const char* onnx_op, std::vector<Tensor> inputs, Attributes attrs) {
  detail::Capture* c = detail::Recording();
  if (c == nullptr) return;
  state_ = std::make_unique<State>(State{c, onnx_op, std::move(inputs), std::move(attrs)});
  ++c->depth;
}

Composite::~Composite() {
  if (state_ && state_->open) --state_->capture->depth;
}

const Tensor& Composite::finish(const Tensor& output) {
  finish(std::vector<Tensor>{output});
  return output;
}

void Composite::finish(const std::vector<Tensor>& outputs) {
  if (!state_ || !state_->open) return;
  detail::Capture* c = state_->capture;
  state_->open = false;
  --c->depth;
  if (!c->any_computed(state_->inputs)) return;  // folded
  std::vector<int> in;
  for (const Tensor& t : state_->inputs) in.push_back(c->resolve(t, state_->op));
  const bool from_inputs = c->any_from_inputs(state_->inputs);
  std::vector<int> results;
  for (const Tensor& t : outputs) results.push_back(c->add_computed(t, from_inputs));
  Node& node = c->add_node();
  node.composite = state_->op;
  node.composite_attrs = std::move(state_->attrs);
  node.inputs = std::move(in);
  node.outputs = std::move(results);
}

Trace capture(const Forward& forward, const std::vector<Tensor>& inputs, const std::vector<std::string>& input_names,
              const ConstantNames& constant_names) {
  ANVIL_CHECK(detail::t_capture == nullptr, "export: a capture is already running on this thread");
  ANVIL_CHECK(inputs.size() == input_names.size(), "export: ", inputs.size(), " inputs but ", input_names.size(),
              " names");
  detail::Capture c;
  c.name_constants(constant_names);
  for (size_t i = 0; i < inputs.size(); ++i) c.add_input(inputs[i], input_names[i]);
  std::vector<Tensor> outputs;
  {
    struct Active {
      explicit Active(detail::Capture* c) { detail::t_capture = c; }
      ~Active() { detail::t_capture = nullptr; }
    } active(&c);
    NoGradGuard no_grad;
    outputs = forward(inputs);
  }
  ANVIL_CHECK(!outputs.empty(), "export: the forward returned no outputs");
  for (const Tensor& t : outputs) {
    ANVIL_CHECK(t.defined(), "export: the forward returned an undefined tensor");
    c.trace.outputs.push_back(c.resolve(t, "the output"));
  }
  return std::move(c.trace);
}

}  // namespace anvil::exporter
