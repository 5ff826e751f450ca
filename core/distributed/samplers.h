// The evaluation side of data::DistributedSampler: each rank visits its shard of a dataset
// once, in order, without the repeats the training sampler pads with (its padding mask drops
// them), so summing loss, samples and correct answers across ranks gives exactly the single
// process's numbers. Ranks may get one sample more or less than each other: evaluation runs
// no collective per batch, only one sum at the end (Trainer::evaluate).
//
// Thread-safety: as data::Sampler (indices() only reads).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/sampler.h"

namespace anvil::distributed {

class EvaluationShardSampler final : public data::Sampler {
 public:
  EvaluationShardSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank);
  std::vector<int64_t> indices() override { return indices_; }
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }

 private:
  std::vector<int64_t> indices_;
};

}  // namespace anvil::distributed
