// nn::Module: see module.h.
#include "core/nn/module.h"

#include <functional>
#include <set>
#include <sstream>

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {
namespace {

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string KeyList(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + ("'" + keys[i] + "'");
  return s;
}

}  // namespace

const Tensor* StateDict::find(const std::string& name) const {
  std::string key = name;
  if (auto it = aliases.find(name); it != aliases.end()) key = it->second;
  for (const auto& [k, t] : tensors) {
    if (k == key) return &t;
  }
  return nullptr;
}

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() = default;

Tensor Module::forward(const Tensor&) {
  throw NotImplementedError(type_name_ + " has no one-tensor forward(); call its own forward method");
}

void Module::register_parameter(std::string name, Tensor& slot, bool requires_grad) {
  ANVIL_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name_, ": parameter name '", name,
              "' must be non-empty and contain no '.'");
  for (const auto& p : parameters_)
    ANVIL_CHECK(p.name != name, type_name_, ": parameter '", name, "' registered twice");
  if (slot.defined()) slot.requires_grad_(requires_grad);
  parameters_.push_back(Slot{std::move(name), &slot});
}

void Module::register_buffer(std::string name, Tensor& slot) {
  ANVIL_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name_, ": buffer name '", name,
              "' must be non-empty and contain no '.'");
  buffers_.push_back(Slot{std::move(name), &slot});
}

void Module::ReplaceChild(const std::string& name, std::shared_ptr<Module> module) {
  ANVIL_CHECK(module != nullptr, type_name_, ": submodule '", name, "' is null");
  for (auto& [n, m] : children_) {
    if (n == name) {
      m = std::move(module);
      return;
    }
  }
  ANVIL_CHECK(false, type_name_, ": no submodule '", name, "' to replace");
}

void Module::RegisterChild(std::string name, std::shared_ptr<Module> module) {
  ANVIL_CHECK(module != nullptr, type_name_, ": submodule '", name, "' is null");
  ANVIL_CHECK(module.get() != this, type_name_, ": a module cannot contain itself");
  for (const auto& [n, m] : children_) ANVIL_CHECK(n != name, type_name_, ": submodule '", name, "' registered twice");
  children_.emplace_back(std::move(name), std::move(module));
}

void Module::AppendIndexedChild(std::shared_ptr<Module> module) {
  ANVIL_CHECK(module != nullptr, type_name_, ": submodule ", children_.size(), " is null");
  ANVIL_CHECK(module.get() != this, type_name_, ": a module cannot contain itself");
  children_.emplace_back(std::to_string(children_.size()), std::move(module));
}

template <typename F>
void Module::VisitSlots(const std::string& prefix, const F& f) const {
  for (const auto& p : parameters_) f(Join(prefix, p.name), p.tensor, true);
  for (const auto& b : buffers_) f(Join(prefix, b.name), b.tensor, false);
  for (const auto& [name, child] : children_) child->VisitSlots(Join(prefix, name), f);
}

std::vector<std::pair<std::string, Tensor>> Module::NamedTensors(bool parameters, bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;
  auto add = [&](const std::string& name, Tensor* t, bool is_param) {
    if (is_param == parameters && t->defined() && seen.insert(t->impl()).second) out.emplace_back(name, *t);
  };
  if (recurse) {
    VisitSlots("", add);
  } else {
    for (const auto& slot : parameters ? parameters_ : buffers_) add(slot.name, slot.tensor, parameters);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  return NamedTensors(true, recurse);
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  return NamedTensors(false, recurse);
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, m] : children_) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  std::set<const Module*> seen;
  std::vector<std::pair<std::string, const Module*>> stack{{"", this}};
  // Depth first in registration order: push children in reverse.
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    out.emplace_back(name, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it) {
      stack.emplace_back(Join(name, it->first), it->second.get());
    }
  }
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) {
    if (!trainable_only || t.requires_grad()) n += t.numel();
  }
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

void Module::Convert(const std::function<bool(const Tensor&)>& applies,
                     const std::function<Tensor(const Tensor&)>& convert) {
  std::set<const TensorImpl*> done;  // a shared tensor is converted once
  VisitSlots("", [&](const std::string&, Tensor* t, bool is_param) {
    if (!t->defined() || done.count(t->impl()) || !applies(*t)) return;
    const bool grad = t->requires_grad();
    Tensor converted = convert(t->detach());
    if (is_param) converted.requires_grad_(grad);
    done.insert(converted.impl());
    *t = converted;
  });
}

void Module::to(ScalarType dtype) {
  Convert([](const Tensor& t) { return t.is_floating_point(); }, [dtype](const Tensor& t) { return t.to(dtype); });
}

void Module::to(Device device) {
  Convert([](const Tensor&) { return true; }, [device](const Tensor& t) { return t.to(device); });
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) {
    if (set_to_none || !p.grad().defined()) {
      p.set_grad(Tensor());
    } else {
      p.set_grad(zeros_like(p.grad()));
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  std::map<const TensorImpl*, std::string> first_name;
  VisitSlots("", [&](const std::string& name, Tensor* t, bool) {
    if (!t->defined()) return;
    auto [it, inserted] = first_name.emplace(t->impl(), name);
    if (inserted) {
      out.tensors.emplace_back(name, t->detach());
    } else {
      out.aliases[name] = it->second;
    }
  });
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::string> missing;
  std::set<std::string> own_keys;
  std::vector<std::pair<std::string, Tensor*>> targets;
  VisitSlots("", [&](const std::string& name, Tensor* t, bool) {
    if (!t->defined()) return;
    own_keys.insert(name);
    if (state.find(name) == nullptr) {
      missing.push_back(name);
    } else {
      targets.emplace_back(name, t);
    }
  });
  std::vector<std::string> unexpected;
  for (const auto& [k, t] : state.tensors) {
    if (!own_keys.count(k)) unexpected.push_back(k);
  }
  for (const auto& [k, target] : state.aliases) {
    if (!own_keys.count(k)) unexpected.push_back(k);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << "Error(s) in loading state_dict for " << type_name_ << ":";
    if (!missing.empty()) os << " missing keys: " << KeyList(missing) << ".";
    if (!unexpected.empty()) os << " unexpected keys: " << KeyList(unexpected) << ".";
    throw Error(os.str());
  }
  // Check every shape before writing anything: a failed load leaves the module untouched.
  for (const auto& [name, t] : targets) {
    const Tensor& src = *state.find(name);
    ANVIL_CHECK(src.sizes() == t->sizes(), "load_state_dict: size mismatch for '", name, "': the checkpoint has ",
                shape_str(src), ", the module has ", shape_str(*t));
  }
  NoGradGuard no_grad;
  for (const auto& [name, t] : targets) t->copy_(*state.find(name));
}

std::string Module::summary() const {
  std::ostringstream os;
  os << "Layer (type)                             Params  Config\n";
  os << "------------------------------------------------------------------------\n";
  std::set<const TensorImpl*> counted;
  for (const auto& [name, m] : named_modules()) {
    int64_t own = 0;
    for (const auto& p : m->parameters_) {
      if (p.tensor->defined() && counted.insert(p.tensor->impl()).second) own += p.tensor->numel();
    }
    std::string label = (name.empty() ? "(root)" : name) + " (" + m->type_name_ + ")";
    if (label.size() < 40) label.resize(40, ' ');
    os << label << " " << own << "  " << m->extra_repr() << "\n";
  }
  os << "------------------------------------------------------------------------\n";
  os << "Total parameters: " << num_parameters() << " (trainable " << num_parameters(true) << ")\n";
  // Sharing: modules reached under a second name, then single parameters shared elsewhere.
  std::map<const Module*, std::string> module_name;
  std::vector<std::string> alias_paths;
  std::function<void(const Module*, const std::string&)> walk = [&](const Module* m, const std::string& prefix) {
    for (const auto& [n, c] : m->children_) {
      const std::string full = Join(prefix, n);
      auto [it, inserted] = module_name.emplace(c.get(), full);
      if (!inserted) {
        os << full << " shares parameters with " << it->second << " (the same " << c->type_name_ << ")\n";
        alias_paths.push_back(full + ".");
        continue;
      }
      walk(c.get(), full);
    }
  };
  walk(this, "");
  std::map<const TensorImpl*, std::string> param_name;
  VisitSlots("", [&](const std::string& name, Tensor* t, bool is_param) {
    if (!is_param || !t->defined()) return;
    auto [it, inserted] = param_name.emplace(t->impl(), name);
    if (inserted) return;
    for (const auto& path : alias_paths) {
      if (name.rfind(path, 0) == 0) return;  // explained by the shared module line
    }
    os << name << " shares parameters with " << it->second << "\n";
  });
  return os.str();
}

}  // namespace anvil::nn
