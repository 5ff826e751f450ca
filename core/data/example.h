// One sample of a dataset, or one collated batch: an ordered set of named fields, each a
// tensor or a nested Example. Names make pipelines self-describing ("input", "target",
// "mask", ...) where PyTorch's positional tuples leave the meaning of element 1 to memory.
//
// Copying an Example copies the field list, not tensor data (tensors are shared handles).
// Thread-safety: a value type (its tensors are shared handles: a copy is safe to read while another
// thread reads the original).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::data {

class Example {
 public:
  // The conventional field names the built-in datasets use.
  static constexpr const char* kInput = "input";
  static constexpr const char* kTarget = "target";

  Example() = default;
  Example(std::initializer_list<std::pair<std::string, Tensor>> fields);

  // Adds or replaces a field; returns *this so calls chain.
  Example& set(std::string name, Tensor value);
  Example& set(std::string name, Example nested);

  bool contains(std::string_view name) const;
  // True when `name` holds a nested Example rather than a tensor.
  bool is_nested(std::string_view name) const;
  // The tensor field `name`; a clear error naming the fields present when it is missing or
  // holds a nested Example.
  const Tensor& operator[](std::string_view name) const;
  const Tensor& at(std::string_view name) const { return (*this)[name]; }
  const Example& nested(std::string_view name) const;

  // Field names in insertion order.
  std::vector<std::string> keys() const;
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  // "{input: float32[8, 8], target: int64[]}", for errors and logs.
  std::string describe() const;

  struct Field {
    std::string name;
    Tensor tensor;                          // defined unless nested
    std::shared_ptr<const Example> nested;  // non-null for a nested Example
  };
  const std::vector<Field>& fields() const { return fields_; }

 private:
  const Field* find(std::string_view name) const;
  std::vector<Field> fields_;
};

}  // namespace anvil::data
