// Datasets, after torch.utils.data: a map-style Dataset defines how to read sample i; an
// IterableDataset yields samples in order. Neither loads anything eagerly beyond what its
// constructor documents; the DataLoader does batching and parallelism.
//
// Thread-safety contract: the DataLoader's worker threads share ONE dataset object (no
// per-worker copies, so memory stays flat as workers grow). Dataset::get is therefore const
// and must be safe to call concurrently; every dataset in Anvil is. IterableDataset::next is
// called under the loader's lock, one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data/example.h"
#include "core/data/transforms.h"

namespace anvil::data {

class Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  // Sample `index` in [0, size()). Implementations check the range with CheckIndex.
  virtual Example get(int64_t index) const = 0;
  // A short description for logs and errors, e.g. "TensorDataset(1797 samples)".
  virtual std::string name() const = 0;

 protected:
  // Throws IndexError naming the dataset, the index and the size when out of range.
  void CheckIndex(int64_t index) const;
};

// A stream of samples with no random access (a socket, a huge file read once).
class IterableDataset {
 public:
  virtual ~IterableDataset();
  // Restarts the stream for a new epoch.
  virtual void reset(int64_t epoch) = 0;
  // The next sample, or nullopt at the end of the epoch. Called one caller at a time.
  virtual std::optional<Example> next() = 0;
  // Per-sample work applied after next() returns, outside the loader's lock, so it runs in
  // parallel across workers (decode, augment). Must be thread-safe. Identity by default.
  virtual Example process(Example raw) const { return raw; }
  virtual std::string name() const = 0;
};

// Rows of equally long tensors: sample i holds row i of every tensor, as a view that shares
// storage (no copy). TensorDataset({{"input", x}, {"target", y}}).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<std::pair<std::string, Tensor>> fields);
  // The usual two-field form: input x and target y.
  TensorDataset(Tensor input, Tensor target);
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override;
  std::string name() const override;
  const Tensor& field(const std::string& name) const;

 private:
  std::vector<std::pair<std::string, Tensor>> fields_;
  int64_t n_ = 0;
};

// The samples of `base` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  std::string name() const override;
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<const Dataset>& base() const { return base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// The datasets one after the other.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> parts);
  int64_t size() const override { return offsets_.back(); }
  Example get(int64_t index) const override;
  std::string name() const override;

 private:
  std::vector<std::shared_ptr<const Dataset>> parts_;
  std::vector<int64_t> offsets_;  // offsets_[k] = samples before part k; back() = total
};

// Applies a function to every sample of `base` on read (lazily, in the loader's workers).
class MapDataset : public Dataset {
 public:
  using Fn = std::function<Example(Example)>;
  MapDataset(std::shared_ptr<const Dataset> base, Fn fn, std::string description = "map");
  // The common case: a Transform applied to one field (default "input").
  MapDataset(std::shared_ptr<const Dataset> base, std::shared_ptr<Transform> transform,
             std::string field = Example::kInput);
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  std::string name() const override;

 private:
  std::shared_ptr<const Dataset> base_;
  Fn fn_;
  std::string description_;
};

// Splits `dataset` into disjoint random subsets of the given lengths, which must sum to its
// size. The permutation is a pure function of `seed` (Philox), like torch's random_split
// with a seeded generator.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, uint64_t seed);
// Fractions summing to 1 (within 1e-6): floor(f * n) each, then the remainder handed out one
// by one to the subsets in order, as torch does.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions, uint64_t seed);

// A random permutation of [0, n), a pure function of (seed, stream): Fisher-Yates over a
// Philox stream. Used by the shuffling samplers and random_split.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream = 0);

}  // namespace anvil::data
