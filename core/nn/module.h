// nn::Module, after torch.nn.Module: a node in a tree of layers that owns parameters
// (trainable tensors), buffers (state that is saved but not trained, e.g. BatchNorm's running
// mean) and child modules.
//
// Ownership: modules are held by shared_ptr; a child registered under two names (a shared
// submodule, e.g. tied encoder/decoder layers) is one object in two places, and every
// traversal (parameters, state_dict, summary) reports it once, naming the alias.
// Parameters are registered by reference to a member of the subclass (`Tensor weight;`), so
// to(dtype) and load_state_dict update the member itself and forward() needs no lookup.
// Modules are therefore neither copyable nor movable.
//
// Thread-safety: none; a module is used by one training thread at a time (serving runs
// forward concurrently only in eval mode under NoGradGuard, which does not mutate it).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::nn {

// The saved state of a module tree: tensors by dotted name ("encoder.0.weight"), in
// registration order, plus aliases for tensors reachable under more than one name.
struct StateDict {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> aliases;  // alias name -> the name its tensor is stored under
  // The tensor stored under `name`, following an alias; nullptr when absent.
  const Tensor* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  size_t size() const { return tensors.size(); }
};

class Module {
 public:
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The one-tensor forward that layers and Sequential use; modules with other signatures
  // (LSTM, attention) add their own and leave this one throwing.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  const std::string& type_name() const { return type_name_; }

  // ---- the tree ----
  // Pairs of (dotted name, tensor). Each tensor once, under the first name that reaches it.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // This module ("") and every descendant, each once, depth first in registration order.
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes and placement ----
  // Recursively sets training mode (Dropout drops, BatchNorm uses batch statistics).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Mixed precision: false keeps this module out of autocast. A Sequential then runs it with
  // autocast disabled, its input cast to float32 (the pitfall guide's remedy for a layer that
  // overflows in float16 or loses too much in bfloat16; "autocast": false in a model spec).
  void set_autocast(bool enabled) { autocast_ = enabled; }
  bool autocast() const { return autocast_; }
  // Converts every parameter and buffer (floating-point ones only, for a dtype).
  void to(ScalarType dtype);
  void to(Device device);
  // Clears gradients: to undefined (the default, like PyTorch 2) or to zeros.
  void zero_grad(bool set_to_none = true);

  // ---- state ----
  StateDict state_dict() const;
  // Copies `state` into this module's tensors (no new tensors: optimizers keep working).
  // strict: every key must match both ways; errors list the missing and the unexpected keys.
  // A shape mismatch is always an error naming the key and both shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

  // A table of every module with its own parameter count, the total, and one line per
  // shared module or parameter ("decoder.weight shares parameters with encoder.weight").
  std::string summary() const;
  // One line describing this module's configuration, e.g. "in=64, out=10, bias=true".
  virtual std::string extra_repr() const { return ""; }

 protected:
  // Registration, from subclass constructors. `slot` must be a member of this object.
  void register_parameter(std::string name, Tensor& slot, bool requires_grad = true);
  void register_buffer(std::string name, Tensor& slot);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    RegisterChild(std::move(name), module);
    return module;
  }
  void RegisterChild(std::string name, std::shared_ptr<Module> module);
  // Replaces the child registered as `name` (it must exist) by `module`.
  void ReplaceChild(const std::string& name, std::shared_ptr<Module> module);
  // Registers `module` under its index ("0", "1", ...) among children registered only this
  // way: unique by construction, so no scan for duplicates (a 10^4-layer Sequential stays
  // linear to build).
  void AppendIndexedChild(std::shared_ptr<Module> module);

 private:
  struct Slot {
    std::string name;
    Tensor* tensor;
  };
  // Visits (dotted name, slot, is_parameter) over the tree, every name, duplicates included.
  template <typename F>
  void VisitSlots(const std::string& prefix, const F& f) const;
  // Replaces every parameter and buffer for which `applies` holds by `convert` of it.
  void Convert(const std::function<bool(const Tensor&)>& applies, const std::function<Tensor(const Tensor&)>& convert);
  // named_parameters (parameters = true) or named_buffers.
  std::vector<std::pair<std::string, Tensor>> NamedTensors(bool parameters, bool recurse) const;

  std::string type_name_;
  bool training_ = true;
  bool autocast_ = true;
  std::vector<Slot> parameters_;
  std::vector<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace anvil::nn
