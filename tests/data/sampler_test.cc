// Data-pipeline samplers (torch.utils.data semantics): visiting order, reproducibility per
// (seed, epoch), weighted draw frequencies, batching, and DistributedSampler sharding and
// padding. Reference values are hand-computed from the definitions.
#include "core/data/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "tests/core/test_util.h"

using namespace anvil::data;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

using namespace anvil::test;

namespace {

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(SequentialSamplerTest, VisitsInOrder) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_THAT(s.indices(), ElementsAre(0, 1, 2, 3, 4));
  s.set_epoch(3);  // no shuffling, so the epoch changes nothing
  EXPECT_THAT(s.indices(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE(SequentialSampler(0).indices().empty());
}

TEST(RandomSamplerTest, IsAPermutation) {
  RandomSampler s(100, /*replacement=*/false, std::nullopt, /*seed=*/7);
  EXPECT_EQ(s.size(), 100);
  const std::vector<int64_t> order = s.indices();
  EXPECT_THAT(order, UnorderedElementsAreArray(Range(100)));
  EXPECT_NE(order, Range(100));  // 1/100! chance of identity
}

TEST(RandomSamplerTest, ReproducibleForSeedAndEpoch) {
  RandomSampler a(50, false, std::nullopt, 42), b(50, false, std::nullopt, 42);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), a.indices());  // no hidden state advances between calls
  RandomSampler c(50, false, std::nullopt, 43);
  EXPECT_NE(a.indices(), c.indices());
}

TEST(RandomSamplerTest, SetEpochChangesOrderReproducibly) {
  RandomSampler a(50, false, std::nullopt, 42), b(50, false, std::nullopt, 42);
  const std::vector<int64_t> epoch0 = a.indices();
  a.set_epoch(1);
  const std::vector<int64_t> epoch1 = a.indices();
  EXPECT_NE(epoch0, epoch1);
  EXPECT_THAT(epoch1, UnorderedElementsAreArray(Range(50)));
  b.set_epoch(1);
  EXPECT_EQ(b.indices(), epoch1);
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), epoch0);
}

TEST(RandomSamplerTest, NumSamplesBeyondNConcatenatesPermutations) {
  RandomSampler s(4, false, 10, 1);
  const std::vector<int64_t> order = s.indices();
  ASSERT_EQ(order.size(), 10u);
  // Two full permutations of {0..3}, then two distinct indices.
  EXPECT_THAT(std::vector<int64_t>(order.begin(), order.begin() + 4), UnorderedElementsAreArray(Range(4)));
  EXPECT_THAT(std::vector<int64_t>(order.begin() + 4, order.begin() + 8), UnorderedElementsAreArray(Range(4)));
  EXPECT_NE(order[8], order[9]);
}

TEST(RandomSamplerTest, WithReplacementStaysInRange) {
  RandomSampler s(3, /*replacement=*/true, 1000, 5);
  const std::vector<int64_t> order = s.indices();
  ASSERT_EQ(order.size(), 1000u);
  std::map<int64_t, int> counts;
  for (int64_t i : order) ++counts[i];
  EXPECT_EQ(counts.size(), 3u);  // only 0, 1, 2 and all of them
  for (const auto& [index, count] : counts) {
    EXPECT_GE(index, 0);
    EXPECT_LT(index, 3);
    EXPECT_NEAR(count / 1000.0, 1.0 / 3, 0.06);
  }
}

TEST(RandomSamplerTest, RejectsBadArguments) {
  EXPECT_THAT(ErrorOf([] { RandomSampler(-1); }), HasSubstr("got -1"));
  EXPECT_THAT(ErrorOf([] { RandomSampler(5, true, 0); }), HasSubstr("positive integer, got 0"));
  EXPECT_THAT(ErrorOf([] { RandomSampler(0, true, 3); }), HasSubstr("got dataset size 0"));
}

TEST(WeightedRandomSamplerTest, FrequenciesMatchWeights) {
  // p = {0.1, 0, 0.3, 0.6}; with 20000 draws one standard deviation is at most
  // sqrt(0.25 / 20000) ~ 0.0035, so 0.015 is over 4 sigma.
  const int64_t draws = 20000;
  WeightedRandomSampler s({1.0, 0.0, 3.0, 6.0}, draws, /*replacement=*/true, 11);
  EXPECT_EQ(s.size(), draws);
  const std::vector<int64_t> order = s.indices();
  ASSERT_EQ(static_cast<int64_t>(order.size()), draws);
  std::vector<int64_t> counts(4, 0);
  for (int64_t i : order) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 4);
    ++counts[i];
  }
  EXPECT_EQ(counts[1], 0);  // zero weight is never drawn
  EXPECT_NEAR(counts[0] / double(draws), 0.1, 0.015);
  EXPECT_NEAR(counts[2] / double(draws), 0.3, 0.015);
  EXPECT_NEAR(counts[3] / double(draws), 0.6, 0.015);
}

TEST(WeightedRandomSamplerTest, ReproducibleAndEpochDependent) {
  WeightedRandomSampler a({1, 2, 3, 4}, 30, true, 3), b({1, 2, 3, 4}, 30, true, 3);
  EXPECT_EQ(a.indices(), b.indices());
  const std::vector<int64_t> epoch0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), epoch0);
}

TEST(WeightedRandomSamplerTest, WithoutReplacementDrawsAreDistinct) {
  // Four positive weights: four draws must be exactly those four indices, never index 2.
  WeightedRandomSampler s({1.0, 2.0, 0.0, 4.0, 8.0}, 4, /*replacement=*/false, 9);
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    s.set_epoch(epoch);
    EXPECT_THAT(s.indices(), UnorderedElementsAre(0, 1, 3, 4));
  }
  WeightedRandomSampler partial({5.0, 1.0, 1.0, 1.0, 1.0, 1.0}, 3, false, 9);
  const std::vector<int64_t> order = partial.indices();
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 3u);
}

TEST(WeightedRandomSamplerTest, WithoutReplacementFirstDrawFollowsWeights) {
  // The first draw without replacement is a plain weighted draw: P(index 1) = 3 / 4.
  WeightedRandomSampler s({1.0, 3.0}, 2, false, 21);
  int first_is_one = 0;
  const int epochs = 4000;
  for (int e = 0; e < epochs; ++e) {
    s.set_epoch(e);
    const std::vector<int64_t> order = s.indices();
    ASSERT_THAT(order, UnorderedElementsAre(0, 1));
    first_is_one += order[0] == 1;
  }
  EXPECT_NEAR(first_is_one / double(epochs), 0.75, 0.035);  // sigma ~ 0.0068
}

TEST(WeightedRandomSamplerTest, RejectsBadWeights) {
  EXPECT_THAT(ErrorOf([] {
                WeightedRandomSampler({1.0, -1.0}, 3);
              }),
              AllOf(HasSubstr("expected non-negative"), HasSubstr("weights[1] = -1")));
  EXPECT_THAT(ErrorOf([] {
                WeightedRandomSampler({0.0, 0.0, 0.0}, 3);
              }),
              AllOf(HasSubstr("expected at least one positive weight"), HasSubstr("all 3 weights zero")));
  EXPECT_THAT(ErrorOf([] { WeightedRandomSampler({}, 3); }), HasSubstr("expected at least one weight"));
  EXPECT_THAT(ErrorOf([] { WeightedRandomSampler({1.0}, 0); }), HasSubstr("positive integer, got 0"));
  EXPECT_THAT(ErrorOf([] {
                WeightedRandomSampler({1.0, 0.0, 2.0}, 3, false);
              }),
              AllOf(HasSubstr("number of positive weights (2)"), HasSubstr("got num_samples = 3")));
}

TEST(SubsetRandomSamplerTest, PermutesTheSubset) {
  const std::vector<int64_t> subset = {10, 20, 30, 40, 50, 60, 70, 80};
  SubsetRandomSampler s(subset, 4), t(subset, 4);
  EXPECT_EQ(s.size(), 8);
  const std::vector<int64_t> epoch0 = s.indices();
  EXPECT_THAT(epoch0, UnorderedElementsAreArray(subset));
  EXPECT_EQ(t.indices(), epoch0);
  s.set_epoch(1);
  EXPECT_THAT(s.indices(), UnorderedElementsAreArray(subset));
  EXPECT_NE(s.indices(), epoch0);
}

TEST(BatchSamplerTest, SizesWithAndWithoutDropLast) {
  auto seq = std::make_shared<SequentialSampler>(10);
  BatchSampler keep(seq, 3, /*drop_last=*/false);
  EXPECT_EQ(keep.size(), 4);
  const auto b = keep.batches();
  ASSERT_EQ(b.size(), 4u);
  EXPECT_THAT(b[0], ElementsAre(0, 1, 2));
  EXPECT_THAT(b[1], ElementsAre(3, 4, 5));
  EXPECT_THAT(b[2], ElementsAre(6, 7, 8));
  EXPECT_THAT(b[3], ElementsAre(9));

  BatchSampler drop(seq, 3, /*drop_last=*/true);
  EXPECT_EQ(drop.size(), 3);
  const auto d = drop.batches();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_THAT(d[2], ElementsAre(6, 7, 8));

  BatchSampler even(std::make_shared<SequentialSampler>(6), 3, true);
  EXPECT_EQ(even.size(), 2);
  EXPECT_EQ(even.batches().size(), 2u);

  EXPECT_THAT(ErrorOf([&] { BatchSampler(seq, 0, false); }), HasSubstr("positive integer, got 0"));
}

TEST(BatchSamplerTest, ForwardsEpochToShufflingSampler) {
  auto rnd = std::make_shared<RandomSampler>(12, false, std::nullopt, 8);
  BatchSampler bs(rnd, 5, false);
  const auto epoch0 = bs.batches();
  bs.set_epoch(1);
  const auto epoch1 = bs.batches();
  EXPECT_NE(epoch0, epoch1);
  std::vector<int64_t> flat;
  for (const auto& batch : epoch1) flat.insert(flat.end(), batch.begin(), batch.end());
  EXPECT_THAT(flat, UnorderedElementsAreArray(Range(12)));
}

// Shards and masks of every rank for one configuration.
struct Shards {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<bool>> masks;
};
Shards AllRanks(int64_t n, int64_t replicas, bool shuffle, uint64_t seed, bool drop_last, int64_t epoch = 0) {
  Shards s;
  for (int64_t r = 0; r < replicas; ++r) {
    DistributedSampler d(n, replicas, r, shuffle, seed, drop_last);
    d.set_epoch(epoch);
    s.indices.push_back(d.indices());
    s.masks.push_back(d.padding_mask());
  }
  return s;
}

TEST(DistributedSamplerTest, NoShuffleIsStridedWithHeadPadding) {
  // n = 10, 3 replicas: total = 12, list = 0..9, 0, 1; rank r takes positions r, r+3, ...
  const Shards s = AllRanks(10, 3, /*shuffle=*/false, 0, /*drop_last=*/false);
  EXPECT_THAT(s.indices[0], ElementsAre(0, 3, 6, 9));
  EXPECT_THAT(s.indices[1], ElementsAre(1, 4, 7, 0));
  EXPECT_THAT(s.indices[2], ElementsAre(2, 5, 8, 1));
  EXPECT_THAT(s.masks[0], ElementsAre(false, false, false, false));
  EXPECT_THAT(s.masks[1], ElementsAre(false, false, false, true));
  EXPECT_THAT(s.masks[2], ElementsAre(false, false, false, true));
  EXPECT_EQ(DistributedSampler(10, 3, 0, false).size(), 4);
  EXPECT_EQ(DistributedSampler(10, 3, 0, false).total_size(), 12);
}

TEST(DistributedSamplerTest, DropLastDropsTheTail) {
  // n = 10, 3 replicas, drop_last: total = 9, index 9 is dropped.
  const Shards s = AllRanks(10, 3, false, 0, /*drop_last=*/true);
  EXPECT_THAT(s.indices[0], ElementsAre(0, 3, 6));
  EXPECT_THAT(s.indices[1], ElementsAre(1, 4, 7));
  EXPECT_THAT(s.indices[2], ElementsAre(2, 5, 8));
  for (const auto& m : s.masks) EXPECT_THAT(m, ElementsAre(false, false, false));
  // Shuffled: 9 distinct indices out of 10, one dropped.
  const Shards t = AllRanks(10, 3, true, 5, true);
  std::set<int64_t> seen;
  for (const auto& shard : t.indices) {
    EXPECT_EQ(shard.size(), 3u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 9u);
}

TEST(DistributedSamplerTest, PaddingLongerThanTheList) {
  // n = 2, 5 replicas: total = 5, list = 0, 1, 0, 1, 0 (the head repeated cyclically).
  const Shards s = AllRanks(2, 5, false, 0, false);
  const std::vector<int64_t> expected = {0, 1, 0, 1, 0};
  const std::vector<bool> padded = {false, false, true, true, true};
  for (int r = 0; r < 5; ++r) {
    EXPECT_THAT(s.indices[r], ElementsAre(expected[r]));
    EXPECT_THAT(s.masks[r], ElementsAre(padded[r]));
  }
  // drop_last with fewer samples than replicas leaves every rank empty.
  for (const auto& shard : AllRanks(2, 5, false, 0, true).indices) EXPECT_TRUE(shard.empty());
}

TEST(DistributedSamplerTest, DivisibleShardsAreDisjointAndCoverEverything) {
  const Shards s = AllRanks(12, 4, true, 3, false);
  std::vector<int64_t> all;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(s.indices[r].size(), 3u);
    EXPECT_THAT(s.masks[r], ElementsAre(false, false, false));  // no padding needed
    all.insert(all.end(), s.indices[r].begin(), s.indices[r].end());
  }
  EXPECT_THAT(all, UnorderedElementsAreArray(Range(12)));  // disjoint union == everything
}

TEST(DistributedSamplerTest, UnmaskedEntriesCountEachSampleOnce) {
  for (int64_t n : {1, 7, 10, 13, 16}) {
    for (int64_t replicas : {1, 2, 3, 4, 5}) {
      const Shards s = AllRanks(n, replicas, true, 17, false, 2);
      const size_t per_rank = s.indices[0].size();
      EXPECT_EQ(static_cast<int64_t>(per_rank), (n + replicas - 1) / replicas);
      std::vector<int64_t> unpadded;
      int64_t padded = 0;
      for (int64_t r = 0; r < replicas; ++r) {
        ASSERT_EQ(s.indices[r].size(), per_rank) << "every rank gets the same length";
        ASSERT_EQ(s.masks[r].size(), per_rank);
        for (size_t j = 0; j < per_rank; ++j) {
          if (s.masks[r][j]) {
            ++padded;
          } else {
            unpadded.push_back(s.indices[r][j]);
          }
        }
      }
      EXPECT_EQ(padded, static_cast<int64_t>(per_rank) * replicas - n) << "n=" << n << " replicas=" << replicas;
      EXPECT_THAT(unpadded, UnorderedElementsAreArray(Range(n))) << "n=" << n << " replicas=" << replicas;
    }
  }
}

TEST(DistributedSamplerTest, RanksAgreeOnTheShuffle) {
  // Each rank shuffles independently; the shards only fit together if every rank derived
  // the same permutation from seed + epoch. Reassemble it by interleaving the shards.
  const int64_t n = 20, replicas = 4;
  const Shards s = AllRanks(n, replicas, true, 99, false, 1);
  std::vector<int64_t> perm(n);
  for (int64_t r = 0; r < replicas; ++r) {
    for (size_t j = 0; j < s.indices[r].size(); ++j) perm[r + j * replicas] = s.indices[r][j];
  }
  EXPECT_THAT(perm, UnorderedElementsAreArray(Range(n)));
  // Recomputing any rank gives the same shard.
  const Shards again = AllRanks(n, replicas, true, 99, false, 1);
  EXPECT_EQ(s.indices, again.indices);
}

TEST(DistributedSamplerTest, SetEpochChangesOrder) {
  const Shards e0 = AllRanks(20, 2, true, 1, false, 0);
  const Shards e1 = AllRanks(20, 2, true, 1, false, 1);
  EXPECT_NE(e0.indices, e1.indices);
  // PyTorch seeds with seed + epoch, so (seed 1, epoch 1) equals (seed 2, epoch 0).
  EXPECT_EQ(e1.indices, AllRanks(20, 2, true, 2, false, 0).indices);
  DistributedSampler d(20, 2, 0, true, 1);
  const std::vector<int64_t> first = d.indices();
  EXPECT_EQ(d.indices(), first);
  d.set_epoch(1);
  EXPECT_NE(d.indices(), first);
  // Without shuffle the epoch does not matter.
  EXPECT_EQ(AllRanks(20, 2, false, 1, false, 0).indices, AllRanks(20, 2, false, 1, false, 5).indices);
}

TEST(DistributedSamplerTest, RejectsBadRankAndReplicas) {
  EXPECT_THAT(ErrorOf([] { DistributedSampler(10, 0, 0); }), HasSubstr("expected num_replicas >= 1, got 0"));
  EXPECT_THAT(ErrorOf([] { DistributedSampler(10, 3, 3); }), HasSubstr("expected rank in [0, 3), got 3"));
  EXPECT_THAT(ErrorOf([] { DistributedSampler(10, 3, -1); }), HasSubstr("expected rank in [0, 3), got -1"));
}

}  // namespace
