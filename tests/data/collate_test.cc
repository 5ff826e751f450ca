// default_collate: stacking, nesting and the errors for mismatched samples.
#include "core/data/collate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/core/test_util.h"

namespace anvil::data {
namespace {

using test::ErrorOf;
using test::Iota;
using test::Vals;
using ::testing::HasSubstr;

TEST(CollateTest, StacksEachFieldAlongANewLeadingDim) {
  std::vector<Example> samples;
  for (int64_t i = 0; i < 3; ++i) {
    samples.push_back(Example{{"input", Iota({2, 2}) + static_cast<double>(i)}, {"target", scalar_tensor(i, kInt64)}});
  }
  Example batch = default_collate(samples);
  EXPECT_EQ(batch["input"].sizes(), (IntArray{3, 2, 2}));
  EXPECT_EQ(batch["target"].sizes(), (IntArray{3}));
  EXPECT_EQ(batch["target"].dtype(), kInt64);
  EXPECT_EQ(Vals(batch["target"]), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(Vals(batch["input"][2]), (std::vector<double>{2, 3, 4, 5}));
}

TEST(CollateTest, RecursesIntoNestedExamples) {
  std::vector<Example> samples;
  for (int64_t i = 0; i < 2; ++i) {
    Example pair{{"left", full({3}, static_cast<double>(i))}, {"right", full({1}, 10.0 + static_cast<double>(i))}};
    Example s{{"id", scalar_tensor(i, kInt64)}};
    s.set("pair", pair);
    samples.push_back(s);
  }
  Example batch = default_collate(samples);
  EXPECT_EQ(batch.nested("pair")["left"].sizes(), (IntArray{2, 3}));
  EXPECT_EQ(Vals(batch.nested("pair")["right"]), (std::vector<double>{10, 11}));
}

TEST(CollateTest, ShapeMismatchNamesFieldPathSampleAndBothShapes) {
  std::vector<Example> samples;
  for (int64_t n : {4, 4, 5}) {
    Example s;
    s.set("pair", Example{{"left", zeros({n})}});
    samples.push_back(s);
  }
  const std::string msg = ErrorOf([&] { default_collate(samples); });
  EXPECT_THAT(msg, HasSubstr("field 'pair.left' has shape [5] in sample 2 but [4] in sample 0"));
  EXPECT_THAT(msg, HasSubstr("custom collate"));
}

TEST(CollateTest, FieldAndDtypeMismatchesAreNamed) {
  std::vector<Example> keys{Example{{"input", zeros({1})}}, Example{{"image", zeros({1})}}};
  EXPECT_THAT(ErrorOf([&] { default_collate(keys); }), HasSubstr("sample 1 of the batch has fields [image]"));
  std::vector<Example> dtypes{Example{{"y", zeros({1})}}, Example{{"y", zeros({1}, kInt64)}}};
  EXPECT_THAT(ErrorOf([&] { default_collate(dtypes); }), HasSubstr("field 'y' is int64 in sample 1 but float32"));
  std::vector<Example> none;
  EXPECT_THAT(ErrorOf([&] { default_collate(none); }), HasSubstr("no samples"));
}

}  // namespace
}  // namespace anvil::data
