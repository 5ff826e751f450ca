// Containers, after torch.nn: Sequential (a chain), ModuleList and ModuleDict (registries).
// Thread-safety: as every module (module.h); registering children is never concurrent with a
// forward.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/nn/module.h"

namespace anvil::nn {

// Applies its modules in order. Children are named "0", "1", ... as in PyTorch, so
// state_dict keys match ("0.weight").
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // Puts `module` in place of layer i, under the same name ("i"): how fusion and quantization
  // rewrite a model (torch's setattr on a Sequential).
  void replace(size_t i, std::shared_ptr<Module> module);

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// An indexed list of modules, registered as "0", "1", ...; no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return items_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// Modules by name, in insertion order; no forward of its own.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  void insert(const std::string& name, std::shared_ptr<Module> module);
  bool contains(const std::string& name) const;
  const std::shared_ptr<Module>& operator[](const std::string& name) const;
  std::vector<std::string> keys() const;

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items_;
};

}  // namespace anvil::nn
