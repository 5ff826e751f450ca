// Datasets: see dataset.h.
#include "core/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/data/philox_stream.h"
#include "core/util/error.h"

namespace anvil::data {

Dataset::~Dataset() = default;
IterableDataset::~IterableDataset() = default;

void Dataset::CheckIndex(int64_t index) const {
  ANVIL_CHECK_INDEX(index >= 0 && index < size(), name(), ": index ", index, " is out of range for ", size(),
                    " samples");
}

// ---- TensorDataset ----

TensorDataset::TensorDataset(std::vector<std::pair<std::string, Tensor>> fields) : fields_(std::move(fields)) {
  ANVIL_CHECK(!fields_.empty(), "TensorDataset: expected at least one tensor");
  for (const auto& [name, t] : fields_) {
    ANVIL_CHECK(t.defined() && t.dim() >= 1, "TensorDataset: field '", name,
                "' must have at least one dim (the sample dim)");
    ANVIL_CHECK(t.size(0) == fields_[0].second.size(0),
                "TensorDataset: every tensor must have the same "
                "number of rows; '",
                fields_[0].first, "' has ", fields_[0].second.size(0), " and '", name, "' has ", t.size(0));
  }
  n_ = fields_[0].second.size(0);
}

TensorDataset::TensorDataset(Tensor input, Tensor target)
    : TensorDataset({{Example::kInput, std::move(input)}, {Example::kTarget, std::move(target)}}) {}

Example TensorDataset::get(int64_t index) const {
  CheckIndex(index);
  Example ex;
  for (const auto& [name, t] : fields_) ex.set(name, t.select(0, index));
  return ex;
}

std::string TensorDataset::name() const { return "TensorDataset(" + std::to_string(n_) + " samples)"; }

const Tensor& TensorDataset::field(const std::string& name) const {
  for (const auto& [n, t] : fields_) {
    if (n == name) return t;
  }
  throw IndexError("TensorDataset: no field '" + name + "'");
}

// ---- Subset ----

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  ANVIL_CHECK(base_ != nullptr, "Subset: the base dataset is null");
  const int64_t n = base_->size();
  for (size_t i = 0; i < indices_.size(); ++i) {
    ANVIL_CHECK_INDEX(indices_[i] >= 0 && indices_[i] < n, "Subset: indices[", i, "] = ", indices_[i],
                      " is out of range for ", base_->name(), " with ", n, " samples");
  }
}

Example Subset::get(int64_t index) const {
  CheckIndex(index);
  return base_->get(indices_[static_cast<size_t>(index)]);
}

std::string Subset::name() const { return "Subset(" + std::to_string(indices_.size()) + " of " + base_->name() + ")"; }

// ---- ConcatDataset ----

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> parts) : parts_(std::move(parts)) {
  ANVIL_CHECK(!parts_.empty(), "ConcatDataset: expected at least one dataset");
  offsets_.push_back(0);
  for (size_t k = 0; k < parts_.size(); ++k) {
    ANVIL_CHECK(parts_[k] != nullptr, "ConcatDataset: dataset ", k, " is null");
    offsets_.push_back(offsets_.back() + parts_[k]->size());
  }
}

Example ConcatDataset::get(int64_t index) const {
  CheckIndex(index);
  // The part k with offsets_[k] <= index < offsets_[k + 1]; empty parts are skipped by
  // upper_bound landing past their (equal) offsets.
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  const auto k = static_cast<size_t>(it - offsets_.begin() - 1);
  return parts_[k]->get(index - offsets_[k]);
}

std::string ConcatDataset::name() const {
  std::string s = "ConcatDataset(";
  for (size_t k = 0; k < parts_.size(); ++k) s += (k ? ", " : "") + parts_[k]->name();
  return s + ")";
}

// ---- MapDataset ----

MapDataset::MapDataset(std::shared_ptr<const Dataset> base, Fn fn, std::string description)
    : base_(std::move(base)), fn_(std::move(fn)), description_(std::move(description)) {
  ANVIL_CHECK(base_ != nullptr, "MapDataset: the base dataset is null");
  ANVIL_CHECK(static_cast<bool>(fn_), "MapDataset: the function is empty");
}

MapDataset::MapDataset(std::shared_ptr<const Dataset> base, std::shared_ptr<Transform> transform, std::string field)
    : base_(std::move(base)) {
  ANVIL_CHECK(base_ != nullptr, "MapDataset: the base dataset is null");
  ANVIL_CHECK(transform != nullptr, "MapDataset: the transform is null");
  description_ = transform->name() + " on '" + field + "'";
  fn_ = [transform, field](Example ex) {
    ex.set(field, (*transform)(ex[field]));
    return ex;
  };
}

Example MapDataset::get(int64_t index) const {
  CheckIndex(index);
  return fn_(base_->get(index));
}

std::string MapDataset::name() const { return "MapDataset(" + description_ + ", " + base_->name() + ")"; }

// ---- random_split ----

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  ANVIL_CHECK(n >= 0, "random_permutation: expected a non-negative size, got ", n);
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  PhiloxStream rng(seed, stream);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(rng.UniformInt(i))]);
  return v;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, uint64_t seed) {
  ANVIL_CHECK(dataset != nullptr, "random_split: the dataset is null");
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    ANVIL_CHECK(lengths[i] >= 0, "random_split: lengths[", i, "] = ", lengths[i], " is negative");
    total += lengths[i];
  }
  ANVIL_CHECK(total == dataset->size(), "random_split: the lengths sum to ", total, " but ", dataset->name(), " has ",
              dataset->size(), " samples");
  // A stream of its own (1) so a split never shares draws with a sampler seeded alike.
  const std::vector<int64_t> perm = random_permutation(total, seed, /*stream=*/1);
  std::vector<std::shared_ptr<Subset>> out;
  auto it = perm.begin();
  for (int64_t len : lengths) {
    out.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(it, it + len)));
    it += len;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions, uint64_t seed) {
  ANVIL_CHECK(dataset != nullptr, "random_split: the dataset is null");
  ANVIL_CHECK(!fractions.empty(), "random_split: expected at least one fraction");
  double sum = 0.0;
  for (size_t i = 0; i < fractions.size(); ++i) {
    ANVIL_CHECK(fractions[i] >= 0.0 && fractions[i] <= 1.0, "random_split: fractions[", i, "] = ", fractions[i],
                " is outside [0, 1]");
    sum += fractions[i];
  }
  ANVIL_CHECK(std::abs(sum - 1.0) <= 1e-6, "random_split: the fractions sum to ", sum, ", expected 1");
  const int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  int64_t assigned = 0;
  for (double f : fractions) {
    lengths.push_back(static_cast<int64_t>(std::floor(f * static_cast<double>(n))));
    assigned += lengths.back();
  }
  for (size_t i = 0; assigned < n; i = (i + 1) % lengths.size(), ++assigned) ++lengths[i];
  return random_split(std::move(dataset), lengths, seed);
}

}  // namespace anvil::data
