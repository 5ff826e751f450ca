// Example: see example.h.
#include "core/data/example.h"

#include <sstream>

#include "core/util/error.h"

namespace anvil::data {
namespace {

std::string KeyList(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s + "]";
}

}  // namespace

Example::Example(std::initializer_list<std::pair<std::string, Tensor>> fields) {
  for (const auto& [name, value] : fields) set(name, value);
}

Example& Example::set(std::string name, Tensor value) {
  ANVIL_CHECK(value.defined(), "Example: field '", name, "' is an undefined tensor");
  for (auto& f : fields_) {
    if (f.name == name) {
      f.tensor = std::move(value);
      f.nested.reset();
      return *this;
    }
  }
  fields_.push_back(Field{std::move(name), std::move(value), nullptr});
  return *this;
}

Example& Example::set(std::string name, Example nested) {
  auto ptr = std::make_shared<const Example>(std::move(nested));
  for (auto& f : fields_) {
    if (f.name == name) {
      f.tensor = Tensor();
      f.nested = std::move(ptr);
      return *this;
    }
  }
  fields_.push_back(Field{std::move(name), Tensor(), std::move(ptr)});
  return *this;
}

const Example::Field* Example::find(std::string_view name) const {
  for (const auto& f : fields_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool Example::contains(std::string_view name) const { return find(name) != nullptr; }

bool Example::is_nested(std::string_view name) const {
  const Field* f = find(name);
  return f != nullptr && f->nested != nullptr;
}

const Tensor& Example::operator[](std::string_view name) const {
  const Field* f = find(name);
  ANVIL_CHECK_INDEX(f != nullptr, "Example: no field '", name, "'; fields are ", KeyList(keys()));
  ANVIL_CHECK_TYPE(f->nested == nullptr, "Example: field '", name,
                   "' holds a nested example, not a tensor; use nested(\"", name, "\")");
  return f->tensor;
}

const Example& Example::nested(std::string_view name) const {
  const Field* f = find(name);
  ANVIL_CHECK_INDEX(f != nullptr, "Example: no field '", name, "'; fields are ", KeyList(keys()));
  ANVIL_CHECK_TYPE(f->nested != nullptr, "Example: field '", name, "' is a tensor, not a nested example");
  return *f->nested;
}

std::vector<std::string> Example::keys() const {
  std::vector<std::string> out;
  out.reserve(fields_.size());
  for (const auto& f : fields_) out.push_back(f.name);
  return out;
}

std::string Example::describe() const {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    const Field& f = fields_[i];
    os << (i ? ", " : "") << f.name << ": ";
    if (f.nested) {
      os << f.nested->describe();
    } else {
      os << f.tensor.dtype() << "[";
      for (size_t d = 0; d < f.tensor.sizes().size(); ++d) os << (d ? ", " : "") << f.tensor.sizes()[d];
      os << "]";
    }
  }
  os << "}";
  return os.str();
}

}  // namespace anvil::data
