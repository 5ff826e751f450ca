// Samplers for the data pipeline, after torch.utils.data: each decides the order in which
// dataset indices are visited during one epoch. Shuffling samplers draw from counter-based
// Philox streams keyed by (seed, epoch), so an epoch's order is a pure function of those two
// values: it is reproducible across runs and processes, and set_epoch(e) gives every epoch a
// different order without any hidden generator state advancing between calls.
//
// Thread-safety: indices(), batches(), size() and padding_mask() only read the sampler, so
// concurrent calls on one sampler are safe; set_epoch() writes, so it must not run
// concurrently with any other call on the same sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace anvil::data {

// One epoch's worth of dataset indices, in visiting order.
class Sampler {
 public:
  virtual ~Sampler();
  // The index order for the current epoch. Calling it twice without set_epoch in between
  // returns the same order.
  virtual std::vector<int64_t> indices() = 0;
  // The number of indices indices() returns.
  virtual int64_t size() const = 0;
  // Selects the epoch; samplers that do not shuffle ignore it.
  virtual void set_epoch(int64_t epoch) {}
};

// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// Uniformly random indices in [0, n). Without replacement the order is a random permutation;
// if num_samples exceeds n, further independent permutations are appended (as PyTorch does).
// With replacement each draw is independent. num_samples defaults to n.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, bool replacement = false, std::optional<int64_t> num_samples = std::nullopt,
                uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return num_samples_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

 private:
  int64_t n_;
  bool replacement_;
  int64_t num_samples_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// Indices in [0, weights.size()) drawn with probability proportional to weights[i]. Weights
// need not sum to 1. Without replacement, draws are successive weighted draws from the
// remaining indices, so no index repeats and zero-weight indices never appear.
class WeightedRandomSampler : public Sampler {
 public:
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement = true, uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return num_samples_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

 private:
  std::vector<double> weights_;
  std::vector<double> cumulative_;  // inclusive prefix sums, for draws with replacement
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// A random permutation of the given indices (e.g. a train split of a larger dataset).
class SubsetRandomSampler : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// Groups another sampler's order into batches of batch_size. The last batch is shorter when
// the count does not divide evenly, unless drop_last, which drops it instead.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last);
  std::vector<std::vector<int64_t>> batches();
  // The number of batches batches() returns.
  int64_t size() const;
  // Forwards to the wrapped sampler.
  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }

 private:
  std::shared_ptr<Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

// The shard of [0, dataset_size) that one of num_replicas processes visits, with
// torch.utils.data.DistributedSampler's exact semantics: the full list (shuffled with
// seed + epoch when shuffle) is padded by cyclically repeating its head up to
// ceil(n / replicas) * replicas entries, or, with drop_last, truncated to
// floor(n / replicas) * replicas; rank r then takes entries r, r + replicas, r + 2*replicas...
// Every rank gets the same number of indices, so collective ops stay in lockstep.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return num_samples_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  // For each entry of indices(): true when it is a repeat added only to pad the shards to
  // equal length. Evaluation that skips these entries counts every sample exactly once.
  std::vector<bool> padding_mask() const;
  // Entries per rank times num_replicas.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace anvil::data
