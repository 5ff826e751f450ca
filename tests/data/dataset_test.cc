// Example, the dataset combinators (TensorDataset, Subset, ConcatDataset, MapDataset) and
// random_split.
#include "core/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/data/example.h"
#include "tests/core/test_util.h"

namespace anvil::data {
namespace {

using test::ErrorOf;
using test::Iota;
using test::Raises;
using test::Vals;
using ::testing::HasSubstr;

std::shared_ptr<TensorDataset> Rows(int64_t n) {
  return std::make_shared<TensorDataset>(Iota({n, 3}), arange(n, kInt64));
}

TEST(ExampleTest, NamedFieldsKeepInsertionOrderAndReplaceInPlace) {
  Example ex{{"input", Iota({2})}, {"target", scalar_tensor(3, kInt64)}};
  ex.set("mask", ones({2}));
  ex.set("input", zeros({5}));
  EXPECT_EQ(ex.keys(), (std::vector<std::string>{"input", "target", "mask"}));
  EXPECT_EQ(ex["input"].numel(), 5);
  EXPECT_EQ(ex.describe(), "{input: float32[5], target: int64[], mask: float32[2]}");
}

TEST(ExampleTest, MissingFieldNamesTheFieldsPresent) {
  Example ex{{"input", Iota({2})}};
  EXPECT_THAT(Raises<IndexError>([&] { (void)ex["label"]; }), HasSubstr("no field 'label'; fields are [input]"));
  Example outer;
  outer.set("pair", ex);
  EXPECT_TRUE(outer.is_nested("pair"));
  EXPECT_THAT(Raises<TypeError>([&] { (void)outer["pair"]; }), HasSubstr("nested"));
  EXPECT_EQ(outer.nested("pair")["input"].numel(), 2);
}

TEST(TensorDatasetTest, SamplesAreRowViewsSharingStorage) {
  Tensor x = Iota({4, 3});
  TensorDataset ds(x, arange(4, kInt64));
  ASSERT_EQ(ds.size(), 4);
  const Example ex = ds.get(2);
  EXPECT_EQ(Vals(ex["input"]), (std::vector<double>{6, 7, 8}));
  EXPECT_EQ(ex["target"].item<int64_t>(), 2);
  EXPECT_TRUE(ex["input"].is_alias_of(x));  // no copy per sample
}

TEST(TensorDatasetTest, RejectsRowCountMismatchAndBadIndices) {
  EXPECT_THAT(ErrorOf([] {
                TensorDataset(Iota({4, 3}), arange(5, kInt64));
              }),
              HasSubstr("'input' has 4 and 'target' has 5"));
  TensorDataset ds(Iota({4, 3}), arange(4, kInt64));
  EXPECT_THAT(Raises<IndexError>([&] { ds.get(4); }), HasSubstr("index 4 is out of range for 4 samples"));
  EXPECT_THAT(Raises<IndexError>([&] { ds.get(-1); }), HasSubstr("index -1"));
}

TEST(SubsetTest, MapsIndicesAndValidatesThemUpFront) {
  auto base = Rows(10);
  Subset sub(base, {7, 2, 2});
  ASSERT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.get(0)["target"].item<int64_t>(), 7);
  EXPECT_EQ(sub.get(2)["target"].item<int64_t>(), 2);
  EXPECT_THAT(Raises<IndexError>([&] { Subset(base, {1, 10}); }), HasSubstr("indices[1] = 10 is out of range"));
}

TEST(ConcatDatasetTest, IndexesAcrossPartsIncludingEmptyOnes) {
  ConcatDataset cat({Rows(3), Rows(0), Rows(2)});
  ASSERT_EQ(cat.size(), 5);
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < cat.size(); ++i) targets.push_back(cat.get(i)["target"].item<int64_t>());
  EXPECT_EQ(targets, (std::vector<int64_t>{0, 1, 2, 0, 1}));
  EXPECT_THROW(cat.get(5), IndexError);
}

TEST(MapDatasetTest, AppliesTransformToOneFieldLazily) {
  auto base = Rows(4);
  auto doubler = std::make_shared<Lambda>([](const Tensor& t) { return t * 2.0; }, "Double");
  MapDataset mapped(base, doubler);
  EXPECT_EQ(Vals(mapped.get(1)["input"]), (std::vector<double>{6, 8, 10}));
  EXPECT_EQ(mapped.get(1)["target"].item<int64_t>(), 1);
  EXPECT_THAT(mapped.name(), HasSubstr("Double on 'input'"));
  MapDataset renamed(base, [](Example ex) { return Example{{"x", ex["input"]}}; });
  EXPECT_EQ(renamed.get(0).keys(), std::vector<std::string>{"x"});
}

TEST(RandomSplitTest, DisjointCoveringAndDeterministicPerSeed) {
  auto base = Rows(100);
  auto parts = random_split(base, std::vector<int64_t>{70, 20, 10}, 42);
  ASSERT_EQ(parts.size(), 3u);
  std::set<int64_t> seen;
  for (const auto& p : parts) seen.insert(p->indices().begin(), p->indices().end());
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(parts[1]->size(), 20);
  auto again = random_split(base, std::vector<int64_t>{70, 20, 10}, 42);
  EXPECT_EQ(parts[0]->indices(), again[0]->indices());
  auto other = random_split(base, std::vector<int64_t>{70, 20, 10}, 43);
  EXPECT_NE(parts[0]->indices(), other[0]->indices());
}

TEST(RandomSplitTest, FractionsHandOutTheRemainderInOrder) {
  // 10 * 0.33 = 3.3 -> floor 3 each = 9; the one left goes to the first part (torch's rule).
  auto parts = random_split(Rows(10), std::vector<double>{0.34, 0.33, 0.33}, 0);
  EXPECT_EQ(parts[0]->size(), 4);
  EXPECT_EQ(parts[1]->size(), 3);
  EXPECT_EQ(parts[2]->size(), 3);
  EXPECT_THAT(ErrorOf([] {
                random_split(Rows(10), std::vector<int64_t>{5, 4}, 0);
              }),
              HasSubstr("lengths sum to 9 but"));
  EXPECT_THAT(ErrorOf([] {
                random_split(Rows(10), std::vector<double>{0.5, 0.4}, 0);
              }),
              HasSubstr("fractions sum to 0.9"));
}

TEST(RandomPermutationTest, IsAPermutationAndUniformOverPositions) {
  // Position of element 0 over many seeds: each of the 5 positions about 1/5 of the time.
  std::vector<int> count(5, 0);
  for (uint64_t seed = 0; seed < 5000; ++seed) {
    auto p = random_permutation(5, seed);
    std::set<int64_t> s(p.begin(), p.end());
    ASSERT_EQ(s.size(), 5u);
    for (size_t i = 0; i < 5; ++i) count[i] += p[i] == 0;
  }
  for (int c : count) EXPECT_NEAR(c, 1000, 150);  // ~5 standard deviations
}

}  // namespace
}  // namespace anvil::data
