// The table's Args column: each row takes one typed argument struct, a call passing another
// is an internal error that names the row and both types, and an empty OpAttrs means the
// row's defaults.
#include <gtest/gtest.h>

#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "tests/core/test_util.h"

namespace anvil {
namespace {

using test::Vals;

TEST(OpArgs, EveryRowNamesAnArgumentStruct) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    EXPECT_LT(info.args, std::variant_size_v<OpArgs> - 1) << info.name;
    EXPECT_NE(op_args_name(info.args), "an unknown argument struct") << info.name;
  }
  EXPECT_EQ(op_args_name(op_info(OpId::Sum).args), "ReduceArgs");
  EXPECT_EQ(op_args_name(op_info(OpId::Conv2d).args), "WindowArgs");
  EXPECT_EQ(op_args_name(op_info(OpId::Neg).args), "NoArgs");
}

TEST(OpArgs, TheWrongStructIsAnInternalErrorNamingTheRow) {
  const Tensor x = arange(6, TensorOptions(kFloat32)).reshape({2, 3});
  try {
    dispatch(OpId::Sum, {x}, SortArgs{.dim = 0});
    FAIL() << "expected an InternalError";
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sum takes ReduceArgs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the call passed SortArgs"), std::string::npos) << msg;
  }
  // The kernel-only entry is checked too (a kernel never reads a struct of another row).
  Tensor out = empty({2, 3});
  EXPECT_THROW(dispatch_into(OpId::Neg, {x}, out, ReduceArgs{}), InternalError);
}

TEST(OpArgs, AnEmptyAttrsMeansTheRowsDefaults) {
  const Tensor a = tensor(std::vector<float>{1, 2, 3});
  const Tensor b = tensor(std::vector<float>{10, 20, 30});
  // add's default alpha is 1; sum's default reduces every dim without keepdim.
  EXPECT_EQ(Vals(dispatch1(OpId::Add, {a, b}, {})), Vals(a + b));
  EXPECT_EQ(dispatch1(OpId::Sum, {a}, {}).item<float>(), 6.0f);
  // A struct that is held is read as given.
  EXPECT_EQ(Vals(dispatch1(OpId::Add, {a, b}, ScaleArgs{.alpha = -2})), (std::vector<double>{-19, -38, -57}));
}

TEST(OpArgs, GetReturnsTheHeldStructOrItsDefaults) {
  const OpAttrs held = ReduceArgs{.dims = {1}, .keepdim = true, .correction = 0};
  EXPECT_EQ(held.get<ReduceArgs>().dims, IntArray{1});
  EXPECT_TRUE(held.get<ReduceArgs>().keepdim);
  EXPECT_EQ(held.get<ReduceArgs>().correction, 0);
  EXPECT_THROW(held.get<WindowArgs>(), InternalError);
  const OpAttrs empty;
  EXPECT_EQ(empty.get<SoftplusArgs>().threshold, 20);  // PyTorch's default
  EXPECT_EQ(empty.get<LeakyReluArgs>().negative_slope, 0.01);
}

}  // namespace
}  // namespace anvil
