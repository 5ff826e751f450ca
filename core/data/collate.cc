// Collation: see collate.h.
#include "core/data/collate.h"

#include <string>

#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

std::string Keys(const Example& ex) {
  std::string s = "[";
  const auto keys = ex.keys();
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s + "]";
}

// Collates samples[*] (all views of the same nesting level) into one Example; `path` is the
// field path of this level for error messages ("" at the top).
Example CollateLevel(const std::vector<const Example*>& samples, const std::string& path) {
  const Example& first = *samples[0];
  const auto& fields = first.fields();
  for (size_t s = 1; s < samples.size(); ++s) {
    const auto& other = samples[s]->fields();
    bool same = other.size() == fields.size();
    for (size_t f = 0; same && f < fields.size(); ++f) same = other[f].name == fields[f].name;
    ANVIL_CHECK(same, "collate: sample ", s, " of the batch has fields ", Keys(*samples[s]),
                path.empty() ? "" : " under '" + path + "'", " but sample 0 has ", Keys(first),
                "; every sample must have the same fields in the same order");
  }
  Example batch;
  for (size_t f = 0; f < fields.size(); ++f) {
    const std::string name = path.empty() ? fields[f].name : path + "." + fields[f].name;
    if (fields[f].nested) {
      std::vector<const Example*> inner;
      for (size_t s = 0; s < samples.size(); ++s) {
        ANVIL_CHECK(samples[s]->fields()[f].nested != nullptr, "collate: field '", name,
                    "' is a nested example in sample 0 but a tensor in sample ", s);
        inner.push_back(samples[s]->fields()[f].nested.get());
      }
      batch.set(fields[f].name, CollateLevel(inner, name));
      continue;
    }
    std::vector<Tensor> parts;
    parts.reserve(samples.size());
    const Tensor& t0 = fields[f].tensor;
    for (size_t s = 0; s < samples.size(); ++s) {
      const auto& field = samples[s]->fields()[f];
      ANVIL_CHECK(field.nested == nullptr, "collate: field '", name,
                  "' is a tensor in sample 0 but a nested example in sample ", s);
      const Tensor& t = field.tensor;
      ANVIL_CHECK(t.dtype() == t0.dtype(), "collate: field '", name, "' is ", t.dtype(), " in sample ", s, " but ",
                  t0.dtype(), " in sample 0");
      ANVIL_CHECK(t.sizes() == t0.sizes(), "collate: field '", name, "' has shape ", shape_str(t), " in sample ", s,
                  " but ", shape_str(t0),
                  " in sample 0; resize or crop to one size in a transform, "
                  "or pass a custom collate (e.g. one that pads)");
      parts.push_back(t);
    }
    batch.set(fields[f].name, stack(parts, 0));
  }
  return batch;
}

}  // namespace

Example default_collate(std::vector<Example>& samples) {
  ANVIL_CHECK(!samples.empty(), "collate: the batch has no samples");
  std::vector<const Example*> ptrs;
  ptrs.reserve(samples.size());
  for (const auto& s : samples) ptrs.push_back(&s);
  return CollateLevel(ptrs, "");
}

}  // namespace anvil::data
