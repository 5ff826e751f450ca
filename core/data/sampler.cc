// Samplers: see sampler.h.
#include "core/data/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/data/philox_stream.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

// Fisher-Yates shuffle of v in place.
void Shuffle(std::vector<int64_t>& v, PhiloxStream& stream) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(stream.UniformInt(i));
    std::swap(v[i - 1], v[j]);
  }
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace

Sampler::~Sampler() = default;

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  ANVIL_CHECK(n >= 0, "SequentialSampler: expected a non-negative dataset size, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() { return Iota(n_); }

RandomSampler::RandomSampler(int64_t n, bool replacement, std::optional<int64_t> num_samples, uint64_t seed)
    : n_(n), replacement_(replacement), num_samples_(num_samples.value_or(n)), seed_(seed) {
  ANVIL_CHECK(n >= 0, "RandomSampler: expected a non-negative dataset size, got ", n);
  ANVIL_CHECK(!num_samples.has_value() || *num_samples > 0,
              "RandomSampler: expected num_samples to be a positive integer, got ", num_samples.value_or(0));
  ANVIL_CHECK(n > 0 || num_samples_ == 0, "RandomSampler: expected a non-empty dataset to draw ", num_samples_,
              " samples from, got dataset size 0");
}

std::vector<int64_t> RandomSampler::indices() {
  PhiloxStream stream(seed_, static_cast<uint64_t>(epoch_));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (replacement_) {
    for (int64_t i = 0; i < num_samples_; ++i) {
      out.push_back(static_cast<int64_t>(stream.UniformInt(static_cast<uint64_t>(n_))));
    }
    return out;
  }
  // Whole permutations first, then the head of one more, so that every index appears
  // either floor or ceil(num_samples / n) times.
  while (static_cast<int64_t>(out.size()) < num_samples_) {
    std::vector<int64_t> perm = Iota(n_);
    Shuffle(perm, stream);
    const int64_t take = std::min<int64_t>(n_, num_samples_ - static_cast<int64_t>(out.size()));
    out.insert(out.end(), perm.begin(), perm.begin() + take);
  }
  return out;
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement,
                                             uint64_t seed)
    : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement), seed_(seed) {
  ANVIL_CHECK(!weights_.empty(), "WeightedRandomSampler: expected at least one weight, got none");
  ANVIL_CHECK(num_samples > 0, "WeightedRandomSampler: expected num_samples to be a positive integer, got ",
              num_samples);
  double total = 0.0;
  int64_t positive = 0;
  cumulative_.reserve(weights_.size());
  for (size_t i = 0; i < weights_.size(); ++i) {
    const double w = weights_[i];
    ANVIL_CHECK(std::isfinite(w) && w >= 0.0,
                "WeightedRandomSampler: expected non-negative finite weights, got weights[", i, "] = ", w);
    total += w;
    if (w > 0.0) ++positive;
    cumulative_.push_back(total);
  }
  ANVIL_CHECK(total > 0.0, "WeightedRandomSampler: expected at least one positive weight, got all ", weights_.size(),
              " weights zero");
  ANVIL_CHECK(replacement || num_samples <= positive, "WeightedRandomSampler: without replacement expected ",
              "num_samples <= the number of positive weights (", positive, "), got num_samples = ", num_samples);
}

std::vector<int64_t> WeightedRandomSampler::indices() {
  PhiloxStream stream(seed_, static_cast<uint64_t>(epoch_));
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  if (replacement_) {
    // Inverse CDF: the first index whose inclusive prefix sum exceeds u * total. Zero-weight
    // indices have an empty interval, so upper_bound never lands on them.
    const double total = cumulative_.back();
    for (int64_t i = 0; i < num_samples_; ++i) {
      const double u = stream.UniformOpen() * total;
      auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
      if (it == cumulative_.end()) --it;  // rounding at the very top of the range
      while (weights_[static_cast<size_t>(it - cumulative_.begin())] == 0.0) --it;
      out.push_back(static_cast<int64_t>(it - cumulative_.begin()));
    }
    return out;
  }
  // Efraimidis-Spirakis: key_i = log(u_i) / w_i; sorting keys in descending order gives the
  // same distribution as drawing one index at a time proportionally to the remaining
  // weights, in O(n log n) rather than O(n * num_samples).
  std::vector<std::pair<double, int64_t>> keyed;
  keyed.reserve(weights_.size());
  for (size_t i = 0; i < weights_.size(); ++i) {
    const double u = stream.UniformOpen();  // drawn for every index so streams stay aligned
    if (weights_[i] > 0.0) keyed.emplace_back(std::log(u) / weights_[i], static_cast<int64_t>(i));
  }
  std::partial_sort(keyed.begin(), keyed.begin() + num_samples_, keyed.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t i = 0; i < num_samples_; ++i) out.push_back(keyed[static_cast<size_t>(i)].second);
  return out;
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed)
    : indices_(std::move(indices)), seed_(seed) {}

std::vector<int64_t> SubsetRandomSampler::indices() {
  PhiloxStream stream(seed_, static_cast<uint64_t>(epoch_));
  std::vector<int64_t> out = indices_;
  Shuffle(out, stream);
  return out;
}

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  ANVIL_CHECK(sampler_ != nullptr, "BatchSampler: expected a sampler, got null");
  ANVIL_CHECK(batch_size > 0, "BatchSampler: expected batch_size to be a positive integer, got ", batch_size);
}

std::vector<std::vector<int64_t>> BatchSampler::batches() {
  const std::vector<int64_t> order = sampler_->indices();
  std::vector<std::vector<int64_t>> out;
  out.reserve(static_cast<size_t>(size()));
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size_)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size_));
    if (drop_last_ && end - start < static_cast<size_t>(batch_size_)) break;
    out.emplace_back(order.begin() + start, order.begin() + end);
  }
  return out;
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  ANVIL_CHECK(dataset_size >= 0, "DistributedSampler: expected a non-negative dataset size, got ", dataset_size);
  ANVIL_CHECK(num_replicas >= 1, "DistributedSampler: expected num_replicas >= 1, got ", num_replicas);
  ANVIL_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: expected rank in [0, ", num_replicas, "), got ",
              rank);
  // drop_last rounds down to a multiple of num_replicas; otherwise round up and pad.
  num_samples_ = drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices() {
  std::vector<int64_t> all = Iota(dataset_size_);
  if (shuffle_) {
    // PyTorch seeds with seed + epoch; every rank computes the same permutation, which is
    // what makes the strided shards disjoint without any communication.
    PhiloxStream stream(seed_ + static_cast<uint64_t>(epoch_), 0);
    Shuffle(all, stream);
  }
  // Global position p holds all[p % n]: positions past n repeat the head cyclically, which
  // covers padding longer than the list itself (n < num_replicas).
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  for (int64_t p = rank_; p < total_size(); p += num_replicas_) {
    out.push_back(all[static_cast<size_t>(p % dataset_size_)]);
  }
  return out;
}

std::vector<bool> DistributedSampler::padding_mask() const {
  std::vector<bool> mask;
  mask.reserve(static_cast<size_t>(num_samples_));
  for (int64_t p = rank_; p < total_size(); p += num_replicas_) mask.push_back(p >= dataset_size_);
  return mask;
}

}  // namespace anvil::data
