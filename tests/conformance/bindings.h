// The Anvil side of each golden case: a binding per "fn" of tests/conformance/make_golden.py
// runs the same call as the PyTorch one the case names, on the case's inputs and attributes.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/io/safetensors.h"

namespace anvil::conformance {

// One case of a golden file: its metadata and its tensors ("<case>/<key>").
struct Case {
  std::string group, name;
  nlohmann::json meta;
  const io::Safetensors* file = nullptr;

  const nlohmann::json& attrs() const { return meta.at("attrs"); }
  bool has(const std::string& key) const { return file->find(name + "/" + key) != nullptr; }
  // A copy, so a binding may write it in place.
  Tensor get(const std::string& key) const;
};

// What a binding produced: the outputs in PyTorch's order, and further (name, got, want)
// checks of its own (a module's parameter gradients).
struct Extra {
  std::string what;
  Tensor got, want;
};
struct Result {
  std::vector<Tensor> outputs;
  std::vector<Extra> extra;
};

// A case the bindings cannot run (unknown fn, op or attribute): always a failure, even where
// PyTorch raised.
struct BindingError : std::logic_error {
  using std::logic_error::logic_error;
};

// `inputs` are the case's inputs, those it differentiates already requiring grad.
using Binding = std::function<Result(const Case&, const std::vector<Tensor>& inputs)>;

const std::map<std::string, Binding>& bindings();

}  // namespace anvil::conformance
