// Bad input raises anvil::Error (IndexError / TypeError where PyTorch raises those), and
// the message says what was expected and what came: the shapes, the index and the size,
// the dtype. Nothing here may crash or return garbage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "tests/core/test_util.h"

using namespace anvil;
using ::testing::AllOf;
using ::testing::HasSubstr;

using namespace anvil::test;

namespace {}  // namespace

// ---------------------------------------------------------------- shapes

TEST(Errors, BinaryOpNotBroadcastable) {
  std::string m = Raises<Error>([] { (void)(Iota({3}) + Iota({4})); });
  EXPECT_THAT(m, AllOf(HasSubstr("[3]"), HasSubstr("[4]")));
  m = Raises<Error>([] { (void)(Iota({2, 3}) * Iota({3, 2})); });
  EXPECT_THAT(m, AllOf(HasSubstr("[2, 3]"), HasSubstr("[3, 2]")));
  m = Raises<Error>([] { (void)where(Iota({2}) > 0, Iota({2}), Iota({5})); });
  EXPECT_THAT(m, HasSubstr("[5]"));
  // In-place: the result would need a bigger self.
  m = Raises<Error>([] {
    Tensor a = Iota({3});
    a.add_(Iota({2, 3}));
  });
  EXPECT_THAT(m, HasSubstr("[2, 3]"));
}

TEST(Errors, MatmulInnerDimMismatch) {
  std::string m = Raises<Error>([] { (void)mm(Iota({2, 3}), Iota({4, 5})); });
  EXPECT_THAT(m, AllOf(HasSubstr("[2, 3]"), HasSubstr("[4, 5]")));
  m = Raises<Error>([] { (void)matmul(Iota({2, 2, 3}), Iota({2, 4, 5})); });
  EXPECT_THAT(m, AllOf(HasSubstr("3"), HasSubstr("4")));
  m = Raises<Error>([] { (void)matmul(Iota({3}), Iota({4})); });
  EXPECT_THAT(m, AllOf(HasSubstr("3"), HasSubstr("4")));
  m = Raises<Error>([] { (void)bmm(Iota({2, 2, 3}), Iota({3, 3, 2})); });
  EXPECT_THAT(m, AllOf(HasSubstr("[2, 2, 3]"), HasSubstr("[3, 3, 2]")));
  m = Raises<Error>([] { (void)mm(Iota({2, 3, 1}), Iota({3, 2})); });
  EXPECT_THAT(m, HasSubstr("[2, 3, 1]"));
  m = Raises<Error>([] { (void)linear(Iota({2, 3}), Iota({4, 5})); });
  EXPECT_THAT(m, HasSubstr("[4, 5]"));
}

TEST(Errors, MatmulDtypeMismatch) {
  std::string m = Raises<TypeError>([] { (void)mm(Iota({2, 2}), Iota({2, 2}).to(kFloat64)); });
  EXPECT_THAT(m, AllOf(HasSubstr("float32"), HasSubstr("float64")));
}

TEST(Errors, ImpossibleView) {
  std::string m = Raises<Error>([] { (void)Iota({16}).view({3, 5}); });
  EXPECT_THAT(m, AllOf(HasSubstr("[3, 5]"), HasSubstr("16")));
  m = Raises<Error>([] { (void)Iota({2, 3}).reshape({4, -1}); });
  EXPECT_THAT(m, AllOf(HasSubstr("[4, -1]"), HasSubstr("6")));
  m = Raises<Error>([] { (void)Iota({3, 4}).t().view({12}); });
  EXPECT_THAT(m, HasSubstr("reshape"));
  m = Raises<Error>([] { (void)Iota({3, 2}).expand({3, 4}); });
  EXPECT_THAT(m, AllOf(HasSubstr("[3, 4]"), HasSubstr("[3, 2]")));
  m = Raises<Error>([] { (void)Iota({2, 3}).permute({0, 0}); });
  EXPECT_THAT(m, HasSubstr("permute"));
}

TEST(Errors, CatStackSplitShapes) {
  std::string m = Raises<Error>([] { (void)cat({Iota({2, 3}), Iota({2, 4})}, 0); });
  EXPECT_THAT(m, AllOf(HasSubstr("3"), HasSubstr("4")));
  m = Raises<Error>([] { (void)cat({Iota({2, 3}), Iota({2, 3, 1})}, 0); });
  EXPECT_THAT(m, HasSubstr("dim"));
  m = Raises<Error>([] { (void)cat(std::vector<Tensor>{}, 0); });
  EXPECT_THAT(m, HasSubstr("empty"));
  m = Raises<Error>([] { (void)cat({scalar_tensor(1.0), scalar_tensor(2.0)}, 0); });
  EXPECT_THAT(m, HasSubstr("zero-dim"));
  m = Raises<Error>([] { (void)stack({Iota({2}), Iota({3})}); });
  EXPECT_THAT(m, AllOf(HasSubstr("[2]"), HasSubstr("[3]")));
  m = Raises<Error>([] { (void)split_with_sizes(Iota({5}), {2, 2}); });
  EXPECT_THAT(m, AllOf(HasSubstr("5"), HasSubstr("[2, 2]")));
}

TEST(Errors, CopyAndIndexPutShapeMismatch) {
  std::string m = Raises<Error>([] {
    Tensor d = zeros({2, 3});
    d.copy_(zeros({4}));
  });
  EXPECT_THAT(m, AllOf(HasSubstr("[4]"), HasSubstr("[2, 3]")));
  m = Raises<Error>([] {
    Tensor d = zeros({5});
    d.index_put_({I64({0, 1})}, Iota({3}));
  });
  EXPECT_THAT(m, AllOf(HasSubstr("[3]"), HasSubstr("[2]")));
}

// ---------------------------------------------------------------- indices

TEST(Errors, SelectOutOfRangeIsIndexError) {
  Tensor x = Iota({3, 4});
  std::string m = Raises<IndexError>([&] { (void)x.select(0, 3); });
  EXPECT_THAT(m, AllOf(HasSubstr("3"), HasSubstr("[3, 4]")));
  m = Raises<IndexError>([&] { (void)x.select(1, -5); });
  EXPECT_THAT(m, HasSubstr("-5"));
  m = Raises<IndexError>([&] { (void)x[7]; });
  EXPECT_THAT(m, HasSubstr("7"));
  m = Raises<IndexError>([&] { (void)x.index({0, 0, 0}); });
  EXPECT_THAT(m, HasSubstr("too many indices"));
  Raises<IndexError>([&] { (void)x.narrow(1, 2, 3); });
  Raises<IndexError>([&] { (void)scalar_tensor(1.0).select(0, 0); });
}

TEST(Errors, DimOutOfRangeIsIndexError) {
  Tensor x = Iota({3, 4});
  std::string m = Raises<IndexError>([&] { (void)x.sum({2}); });
  EXPECT_THAT(m, HasSubstr("2"));
  EXPECT_THAT(m, HasSubstr("[-2, 1]"));
  Raises<IndexError>([&] { (void)x.transpose(0, 2); });
  Raises<IndexError>([&] { (void)softmax(x, 2); });
  Raises<IndexError>([&] { (void)x.size(-3); });
  Raises<IndexError>([&] { (void)cat({x, x}, 2); });
}

TEST(Errors, IndexSelectOutOfRange) {
  Tensor x = Iota({3, 4});
  std::string m = Raises<IndexError>([&] { (void)index_select(x, 0, I64({0, 7})); });
  EXPECT_THAT(m, AllOf(HasSubstr("7"), HasSubstr("3")));
  m = Raises<IndexError>([&] { (void)index_select(x, 1, I64({4})); });
  EXPECT_THAT(m, AllOf(HasSubstr("4"), HasSubstr("size 4")));
  // Non-contiguous input takes another kernel path: same check.
  m = Raises<IndexError>([&] { (void)index_select(x.t(), 0, I64({9})); });
  EXPECT_THAT(m, HasSubstr("9"));
}

TEST(Errors, GatherScatterOutOfRange) {
  Tensor x = Iota({2, 3});
  std::string m = Raises<IndexError>([&] { (void)gather(x, 1, I64({0, 3}, IntArray{1, 2})); });
  EXPECT_THAT(m, AllOf(HasSubstr("3"), HasSubstr("size 3")));
  m = Raises<IndexError>([&] { (void)scatter(zeros({2, 3}), 0, I64({5}, IntArray{1, 1}), Iota({1, 1})); });
  EXPECT_THAT(m, HasSubstr("5"));
  m = Raises<IndexError>([&] { (void)scatter_add(zeros({4}), 0, I64({4}), Iota({1})); });
  EXPECT_THAT(m, HasSubstr("4"));
  m = Raises<IndexError>([&] { (void)index_add(zeros({3}), 0, I64({3}), Iota({1})); });
  EXPECT_THAT(m, HasSubstr("3"));
  // Index shapes that do not fit the input.
  Raises<Error>([&] { (void)gather(x, 1, I64({0, 0, 0}, IntArray{3, 1})); });
  Raises<Error>([&] { (void)gather(x, 1, I64({0, 0})); });
}

// Regression test (was an engine bug): scatter_reduce's index was not checked against src
// and self as scatter's is, so an index larger than src read past src's storage. PyTorch:
// "Expected index [...] to be smaller than self [...] apart from dimension 0 and to be
// smaller size than src [...]".
TEST(Errors, ScatterReduceIndexLargerThanSrcOrSelfIsRejected) {
  const Tensor index = I64({0, 1, 0, 1, 0, 1}, IntArray{3, 2});
  std::string m = Raises<Error>([&] { (void)scatter_reduce(zeros({2, 2}), 0, index, Iota({2, 2}), "sum"); });
  EXPECT_THAT(m, AllOf(HasSubstr("scatter_reduce"), HasSubstr("larger than src")));
  m = Raises<Error>([&] { (void)scatter_reduce(zeros({4, 1}), 0, index, Iota({3, 2}), "amax"); });
  EXPECT_THAT(m, AllOf(HasSubstr("scatter_reduce"), HasSubstr("larger than self")));
  // The same shapes PyTorch accepts still work: index [3, 2] into self [2, 2] along dim 0.
  const Tensor ok = scatter_reduce(zeros({2, 2}), 0, index, Iota({3, 2}), "sum");
  EXPECT_EQ(ok.sizes(), (IntArray{2, 2}));
}

// Regression test (was an engine bug).
TEST(Errors, NegativeIndexToGatherScatterIndexSelectIsRejected) {
  // PyTorch wraps negative indices only in x[idx] (advanced indexing). gather, scatter(_add),
  // index_select and index_add reject them ("index -1 is out of bounds for dimension 0 with
  // size 3" / "index out of range in self"), so an ignore_index of -1 in a label tensor
  // cannot silently pick the last class.
  Tensor x = Iota({3});
  std::string m = Raises<IndexError>([&] { (void)gather(x, 0, I64({-1})); });
  EXPECT_THAT(m, HasSubstr("-1"));
  m = Raises<IndexError>([&] { (void)index_select(x, 0, I64({0, -1})); });
  EXPECT_THAT(m, HasSubstr("-1"));
  Raises<IndexError>([&] { (void)scatter(zeros({3}), 0, I64({-1}), Iota({1})); });
  Raises<IndexError>([&] { (void)scatter_add(zeros({3}), 0, I64({-2}), Iota({1})); });
  Raises<IndexError>([&] { (void)index_add(zeros({3}), 0, I64({-1}), Iota({1})); });
  // Advanced indexing does wrap.
  EXPECT_EQ(x.index({I64({-1})}).item<float>(), 2.0f);
}

TEST(Errors, AdvancedIndexOutOfRange) {
  Tensor x = Iota({5, 6, 7});
  std::string m = Raises<IndexError>([&] { (void)x.index({I64({0, 5})}); });
  EXPECT_THAT(m, AllOf(HasSubstr("5"), HasSubstr("size 5")));
  m = Raises<IndexError>([&] { (void)x.index({Slice(), I64({-7})}); });
  EXPECT_THAT(m, AllOf(HasSubstr("-7"), HasSubstr("size 6")));
  m = Raises<IndexError>([&] { (void)x.index({I64({0}), Slice(), I64({7})}); });
  EXPECT_THAT(m, HasSubstr("7"));
  m = Raises<IndexError>([&] {
    Tensor y = zeros({3});
    y.index_put_({I64({3})}, Scalar(1.0));
  });
  EXPECT_THAT(m, HasSubstr("3"));
  m = Raises<IndexError>([&] {
    Tensor y = zeros({3});
    index_put_(y, {I64({-4})}, Iota({1}), true);
  });
  EXPECT_THAT(m, HasSubstr("-4"));
  // Bool mask of the wrong shape.
  m = Raises<IndexError>([&] { (void)x.index({tensor(std::vector<bool>{true, false})}); });
  EXPECT_THAT(m, AllOf(HasSubstr("[2]"), HasSubstr("[5, 6, 7]")));
  // Too many index tensors.
  Raises<IndexError>([&] { (void)Iota({2}).index({I64({0}), I64({0})}); });
}

TEST(Errors, TopkOneHotOutOfRange) {
  std::string m = Raises<IndexError>([] { (void)topk(Iota({4}), 5); });
  EXPECT_THAT(m, AllOf(HasSubstr("5"), HasSubstr("4")));
  m = Raises<Error>([] { (void)one_hot(I64({0, 3}), 3); });
  EXPECT_THAT(m, HasSubstr("3"));
  Raises<Error>([] { (void)one_hot(I64({-1, 0}), 3); });
}

// ---------------------------------------------------------------- dtypes

TEST(Errors, FloatIndexTensorIsTypeError) {
  Tensor x = Iota({4});
  Tensor fidx = tensor({0.0, 1.0});  // float32
  std::string m = Raises<TypeError>([&] { (void)index_select(x, 0, fidx); });
  EXPECT_THAT(m, HasSubstr("float32"));
  m = Raises<TypeError>([&] { (void)x.index({fidx}); });
  EXPECT_THAT(m, HasSubstr("float32"));
  m = Raises<TypeError>([&] { (void)gather(x, 0, fidx); });
  EXPECT_THAT(m, HasSubstr("float32"));
  m = Raises<TypeError>([&] { (void)scatter_add(x, 0, fidx, Iota({2})); });
  EXPECT_THAT(m, HasSubstr("float32"));
  m = Raises<TypeError>([&] {
    Tensor y = zeros({4});
    y.index_put_({fidx}, Scalar(1.0));
  });
  EXPECT_THAT(m, HasSubstr("float32"));
  m = Raises<TypeError>([] { (void)one_hot(tensor({1.0})); });
  EXPECT_THAT(m, HasSubstr("float32"));
}

TEST(Errors, RequiresGradOnIntegerTensor) {
  std::string m = Raises<TypeError>([] { (void)arange(3).requires_grad_(); });
  EXPECT_THAT(m, AllOf(HasSubstr("floating point"), HasSubstr("int64")));
  Raises<TypeError>([] { (void)zeros({2}, kBool).requires_grad_(); });
  Raises<TypeError>([] { (void)zeros({2}, TensorOptions(kInt32).with_requires_grad()); });
  // requires_grad_(false) on an int tensor is harmless.
  EXPECT_NO_THROW(arange(3).requires_grad_(false));
}

TEST(Errors, OtherDtypeMistakes) {
  std::string m = Raises<TypeError>([] {
    Tensor i = arange(3);
    i.add_(0.5);
  });
  EXPECT_THAT(m, AllOf(HasSubstr("float32"), HasSubstr("int64")));
  m = Raises<TypeError>([] {
    Tensor b = zeros({2}, kBool);
    (void)(b - b);
  });
  EXPECT_THAT(m, HasSubstr("bool"));
  m = Raises<TypeError>([] { (void)where(Iota({2}), Iota({2}), Iota({2})); });
  EXPECT_THAT(m, HasSubstr("float32"));
  m = Raises<TypeError>([] { (void)Iota({2}).masked_fill(arange(2), 0); });
  EXPECT_THAT(m, HasSubstr("int64"));
  m = Raises<TypeError>([] { (void)Iota({2}).data_ptr<double>(); });
  EXPECT_THAT(m, AllOf(HasSubstr("float64"), HasSubstr("float32")));
  m = Raises<TypeError>([] { (void)mean(arange(4)); });
  EXPECT_THAT(m, HasSubstr("int64"));
  m = Raises<Error>([] { (void)pow(arange(3), -1); });
  EXPECT_THAT(m, HasSubstr("negative"));
}

// ---------------------------------------------------------------- scalars and empties

TEST(Errors, ItemOnMultiElementTensor) {
  std::string m = Raises<Error>([] { (void)Iota({3}).item<float>(); });
  EXPECT_THAT(m, HasSubstr("3 elements"));
  m = Raises<Error>([] { (void)zeros({0}).item<double>(); });
  EXPECT_THAT(m, HasSubstr("0 elements"));
}

TEST(Errors, ReductionsWithoutIdentityOnEmpty) {
  Raises<Error>([] { (void)zeros({0}).max(); });
  Raises<Error>([] { (void)argmax(zeros({0})); });
  Raises<Error>([] { (void)max(zeros({0, 3}), 0); });
  // amax over a zero-size dim has no value to return (PyTorch: "Expected reduction dim 0 to
  // have non-zero size").
  std::string m = Raises<Error>([] { (void)amax(zeros({0, 3}), {0}); });
  EXPECT_THAT(m, HasSubstr("amax"));
}

TEST(Errors, BadFactoryArguments) {
  Raises<Error>([] { (void)arange(0, 5, 0); });
  Raises<Error>([] { (void)arange(5, 0, 1); });
  Raises<Error>([] { (void)linspace(0, 1, -1); });
  Raises<Error>([] { (void)randint(5, 5, {3}); });
  Raises<Error>([] { (void)randperm(-1); });
  std::string m = Raises<Error>([] { (void)tensor(std::vector<float>{1, 2, 3}, IntArray{2, 2}); });
  EXPECT_THAT(m, AllOf(HasSubstr("[2, 2]"), HasSubstr("3")));
  Raises<Error>([] { (void)Iota({2}).uniform_(1, 0); });
  Raises<Error>([] { (void)Iota({2}).bernoulli_(1.5); });
  Raises<Error>([] { (void)clamp(Iota({2}), std::nullopt, std::nullopt); });
  Raises<Error>([] { (void)gelu(Iota({2}), "fast"); });
}

// ---------------------------------------------------------------- devices

TEST(Errors, CudaTensorWithoutCudaIsAClearError) {
  std::string m = Raises<Error>([] { (void)zeros({2}, Device("cuda:0")); });
  EXPECT_THAT(m, HasSubstr("cuda:0"));
  EXPECT_THAT(m, HasSubstr("CUDA"));
  m = Raises<Error>([] { (void)Iota({2}).to(CUDA(0)); });
  EXPECT_THAT(m, HasSubstr("cuda"));
  m = Raises<Error>([] { (void)tensor({1.0, 2.0}, TensorOptions(CUDA(1))); });
  EXPECT_THAT(m, HasSubstr("cuda:1"));
  m = Raises<Error>([] { (void)rand({3}, TensorOptions(Device("cuda"))); });
  EXPECT_THAT(m, HasSubstr("cuda"));
  // Parsing.
  EXPECT_EQ(Device("cuda:3").index, 3);
  EXPECT_TRUE(Device("cuda").is_cuda());
  EXPECT_TRUE(Device("cpu").is_cpu());
  m = Raises<Error>([] { (void)Device("gpu:0"); });
  EXPECT_THAT(m, HasSubstr("gpu:0"));
  Raises<Error>([] { (void)Device("cuda:x"); });
  Raises<Error>([] { (void)Device("cuda:"); });
}

TEST(Errors, SetNumThreadsRejectsZero) {
  std::string m = Raises<Error>([] { set_num_threads(0); });
  EXPECT_THAT(m, HasSubstr("0"));
}
