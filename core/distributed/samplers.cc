// EvaluationShardSampler: see samplers.h.
#include "core/distributed/samplers.h"

namespace anvil::distributed {

EvaluationShardSampler::EvaluationShardSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank) {
  data::DistributedSampler shard(dataset_size, num_replicas, rank, /*shuffle=*/false);
  const std::vector<int64_t> all = shard.indices();
  const std::vector<bool> padding = shard.padding_mask();
  for (size_t i = 0; i < all.size(); ++i) {
    if (!padding[i]) indices_.push_back(all[i]);
  }
}

}  // namespace anvil::distributed
