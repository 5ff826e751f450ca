// Views, copies and aliasing (docs/pitfalls.md section 2): every strided view shares its base's
// storage and version counter, writes through a view reach the base, reshape copies only
// when the strides force it, clone copies and detach aliases. Expected values are worked
// out by hand from row-major layouts (x = arange(n) so that x's value == its linear index).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/anvil.h"
#include "tests/core/test_util.h"

using namespace anvil;
using ::testing::AllOf;
using ::testing::HasSubstr;

using namespace anvil::test;

namespace {

// Byte distance between two tensors' first elements.
int64_t ByteOffset(const Tensor& view, const Tensor& base) {
  return static_cast<const char*>(view.data_ptr()) - static_cast<const char*>(base.data_ptr());
}

}  // namespace

// ---------------------------------------------------------------- view / reshape

TEST(Views, ViewSharesStorageAndBase) {
  Tensor x = Iota({12});
  Tensor v = x.view({3, 4});
  EXPECT_EQ(v.sizes(), (IntArray{3, 4}));
  EXPECT_EQ(v.strides(), (IntArray{4, 1}));
  EXPECT_TRUE(v.is_alias_of(x));
  EXPECT_TRUE(x.is_alias_of(v));
  EXPECT_EQ(v.data_ptr(), x.data_ptr());
  EXPECT_TRUE(v.is_view());
  EXPECT_FALSE(x.is_view());
  ASSERT_TRUE(v._base().defined());
  EXPECT_EQ(v._base().impl(), x.impl());
  EXPECT_FALSE(x._base().defined());
  EXPECT_EQ(Vals(v), Vals(x));
}

TEST(Views, WriteThroughViewChangesBase) {
  Tensor x = Iota({12});
  Tensor v = x.view({3, 4});
  v.mul_(2);
  std::vector<double> want;
  for (int i = 0; i < 12; ++i) want.push_back(2.0 * i);
  EXPECT_EQ(Vals(x), want);
  // And the other way round.
  x.fill_(5);
  EXPECT_EQ(Vals(v), std::vector<double>(12, 5.0));
}

TEST(Views, ViewInfersMinusOne) {
  Tensor x = Iota({2, 3, 4});
  EXPECT_EQ(x.view({-1}).sizes(), (IntArray{24}));
  EXPECT_EQ(x.view({4, -1}).sizes(), (IntArray{4, 6}));
  EXPECT_EQ(x.view({-1, 2, 3}).sizes(), (IntArray{4, 2, 3}));
  EXPECT_TRUE(x.view({4, -1}).is_alias_of(x));
}

TEST(Views, ViewOfViewHasRootBase) {
  Tensor x = Iota({3, 4});
  Tensor z = x.view({4, 3}).transpose(0, 1).select(0, 1);
  ASSERT_TRUE(z._base().defined());
  EXPECT_EQ(z._base().impl(), x.impl());
  EXPECT_TRUE(z.is_alias_of(x));
  // x.view(4,3) = [[0,1,2],[3,4,5],[6,7,8],[9,10,11]]; its transpose's row 1 = column 1.
  EXPECT_EQ(Vals(z), (std::vector<double>{1, 4, 7, 10}));
}

TEST(Views, ReshapeOfContiguousIsAView) {
  Tensor x = Iota({2, 6});
  Tensor r = x.reshape({3, 4});
  EXPECT_TRUE(r.is_alias_of(x));
  EXPECT_EQ(r.data_ptr(), x.data_ptr());
  EXPECT_EQ(Vals(r), Vals(x));
  r.add_(1);
  EXPECT_EQ(x.to_vector<double>()[0], 1.0);
}

TEST(Views, ReshapeOfTransposedCopies) {
  Tensor x = Iota({3, 4});
  Tensor t = x.t();  // [4, 3], strides [1, 4]
  Tensor r = t.reshape({-1});
  EXPECT_FALSE(r.is_alias_of(x)) << "reshape must copy when the strides force it";
  EXPECT_TRUE(r.is_contiguous());
  // Row-major walk of x.t(): t[i][j] = x[j][i] = 4 * j + i.
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(4.0 * j + i);
  EXPECT_EQ(Vals(r), want);
  // The copy is independent of the base.
  r.fill_(-1);
  EXPECT_EQ(Vals(x)[1], 1.0);
}

TEST(Views, ReshapeOfTransposedIsAViewWhenStridesAllow) {
  Tensor x = Iota({3, 4});
  Tensor t = x.t();                 // [4, 3] strides [1, 4]
  Tensor r = t.reshape({4, 1, 3});  // only inserts a size-1 dim: expressible with strides
  EXPECT_TRUE(r.is_alias_of(x));
  EXPECT_EQ(r.sizes(), (IntArray{4, 1, 3}));
  EXPECT_EQ(Vals(r), Vals(t));
  // Splitting a dim of a non-contiguous tensor is also a view: x[:, ::2] is [3, 2] with
  // strides [4, 2]; reshape to [3, 2, 1] or [3, 1, 2] keeps it a view.
  Tensor s = x.slice(1, 0, std::nullopt, 2);
  EXPECT_TRUE(s.reshape({3, 1, 2}).is_alias_of(x));
  // Flattening it is still a view: its elements are evenly spaced (stride 2).
  Tensor f = s.reshape({6});
  EXPECT_TRUE(f.is_alias_of(x));
  EXPECT_EQ(f.strides(), (IntArray{2}));
  EXPECT_EQ(Vals(f), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  // x[:, :3] is [3, 3] with strides [4, 1]: flattening it must copy.
  Tensor n = x.narrow(1, 0, 3);
  Tensor nf = n.reshape({9});
  EXPECT_FALSE(nf.is_alias_of(x));
  EXPECT_EQ(Vals(nf), (std::vector<double>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
  EXPECT_TRUE(n.reshape({3, 3, 1}).is_alias_of(x));
}

TEST(Views, ViewOnNonContiguousThatNeedsCopyThrowsAndNamesReshape) {
  Tensor x = Iota({3, 4});
  std::string msg = ErrorOf([&] { x.t().view({12}); });
  EXPECT_THAT(msg, HasSubstr("reshape"));
  EXPECT_THAT(msg, HasSubstr("[12]"));
}

TEST(Views, ImpossibleViewMessageNamesShapeAndSize) {
  Tensor x = Iota({16});
  std::string msg = ErrorOf([&] { x.view({3, 5}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("[3, 5]"), HasSubstr("16")));
  msg = ErrorOf([&] { x.reshape({5, -1}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("[5, -1]"), HasSubstr("16")));
  msg = ErrorOf([&] { x.view({-1, -1}); });
  EXPECT_THAT(msg, HasSubstr("-1"));
  EXPECT_THROW(x.view({3, 5}), Error);
}

// ---------------------------------------------------------------- transpose / permute / t

TEST(Views, TransposeSwapsStridesAndShares) {
  Tensor x = Iota({2, 3});
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(t.sizes(), (IntArray{3, 2}));
  EXPECT_EQ(t.strides(), (IntArray{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.is_alias_of(x));
  EXPECT_EQ(t.data_ptr(), x.data_ptr());
  // t[i][j] = x[j][i] = 3j + i.
  EXPECT_EQ(Vals(t), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(Vals(x.transpose(-1, -2)), Vals(t));
  // Write t[2][1] = x[1][2] (linear index 5).
  t.select(0, 2).select(0, 1).fill_(100);
  EXPECT_EQ(Vals(x)[5], 100.0);
}

TEST(Views, TOnMatrixVectorAndScalar) {
  Tensor m = Iota({2, 3});
  EXPECT_EQ(m.t().sizes(), (IntArray{3, 2}));
  Tensor v = Iota({4});
  Tensor vt = v.t();
  EXPECT_EQ(vt.sizes(), (IntArray{4}));
  EXPECT_TRUE(vt.is_alias_of(v));
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ(s.t().dim(), 0);
  EXPECT_THROW(Iota({2, 2, 2}).t(), Error);
  EXPECT_EQ(Vals(m.mT()), Vals(m.t()));
}

TEST(Views, PermuteValuesAndStrides) {
  Tensor x = Iota({2, 3, 4});  // strides [12, 4, 1]
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (IntArray{4, 2, 3}));
  EXPECT_EQ(p.strides(), (IntArray{1, 12, 4}));
  EXPECT_TRUE(p.is_alias_of(x));
  // p[k][i][j] = x[i][j][k] = 12i + 4j + k.
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(12.0 * i + 4.0 * j + k);
  EXPECT_EQ(Vals(p), want);
  EXPECT_EQ(Vals(x.permute({-1, 0, 1})), want);
  EXPECT_THROW(x.permute({0, 0, 1}), Error);
  EXPECT_THROW(x.permute({0, 1}), Error);
}

TEST(Views, MovedimMatchesPermute) {
  Tensor x = Iota({2, 3, 4});
  EXPECT_EQ(x.movedim(0, 2).sizes(), (IntArray{3, 4, 2}));
  EXPECT_EQ(Vals(x.movedim(0, 2)), Vals(x.permute({1, 2, 0})));
  EXPECT_EQ(Vals(x.movedim(-1, 0)), Vals(x.permute({2, 0, 1})));
  EXPECT_TRUE(x.movedim(0, 2).is_alias_of(x));
}

// ---------------------------------------------------------------- narrow / slice / select

TEST(Views, NarrowOffsetsDataPointer) {
  Tensor x = Iota({10});
  Tensor n = x.narrow(0, 2, 3);
  EXPECT_EQ(n.sizes(), (IntArray{3}));
  EXPECT_EQ(n.storage_offset(), 2);
  EXPECT_EQ(ByteOffset(n, x), 2 * 4);
  EXPECT_TRUE(n.is_alias_of(x));
  EXPECT_EQ(Vals(n), (std::vector<double>{2, 3, 4}));
  // Narrow of a narrow: offsets add up.
  Tensor nn = n.narrow(0, 1, 2);
  EXPECT_EQ(nn.storage_offset(), 3);
  EXPECT_EQ(Vals(nn), (std::vector<double>{3, 4}));
  EXPECT_EQ(nn._base().impl(), x.impl());
  // Negative start counts from the end.
  EXPECT_EQ(Vals(x.narrow(0, -2, 2)), (std::vector<double>{8, 9}));
  n.zero_();
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 1, 0, 0, 0, 5, 6, 7, 8, 9}));
}

TEST(Views, NarrowOnInnerDim) {
  Tensor x = Iota({3, 4});
  Tensor n = x.narrow(1, 1, 2);
  EXPECT_EQ(n.sizes(), (IntArray{3, 2}));
  EXPECT_EQ(n.strides(), (IntArray{4, 1}));
  EXPECT_EQ(ByteOffset(n, x), 4);
  EXPECT_FALSE(n.is_contiguous());
  EXPECT_EQ(Vals(n), (std::vector<double>{1, 2, 5, 6, 9, 10}));
}

TEST(Views, SliceWithStep) {
  Tensor x = Iota({10});
  Tensor s = x.slice(0, 1, 8, 3);
  EXPECT_EQ(s.sizes(), (IntArray{3}));
  EXPECT_EQ(s.strides(), (IntArray{3}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(ByteOffset(s, x), 4);
  EXPECT_TRUE(s.is_alias_of(x));
  EXPECT_EQ(Vals(s), (std::vector<double>{1, 4, 7}));
  // Python slice semantics: missing bounds, negative bounds, bounds past the end.
  EXPECT_EQ(Vals(x.slice(0, std::nullopt, std::nullopt, 4)), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(Vals(x.slice(0, -3, std::nullopt)), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(Vals(x.slice(0, 8, 100)), (std::vector<double>{8, 9}));
  EXPECT_EQ(x.slice(0, 5, 2).numel(), 0);
  EXPECT_EQ(Vals(x.slice(0, 0, -7, 2)), (std::vector<double>{0, 2}));
  s.fill_(-1);
  EXPECT_EQ(Vals(x), (std::vector<double>{0, -1, 2, 3, -1, 5, 6, -1, 8, 9}));
}

TEST(Views, IndexWithSliceStepIsAView) {
  Tensor x = Iota({10});
  Tensor e = x.index({Slice(0, std::nullopt, 2)});
  EXPECT_TRUE(e.is_alias_of(x));
  EXPECT_EQ(e.strides(), (IntArray{2}));
  EXPECT_EQ(Vals(e), (std::vector<double>{0, 2, 4, 6, 8}));
  // 2-D: every other row, columns 1..3.
  Tensor m = Iota({4, 5});
  Tensor w = m.index({Slice(std::nullopt, std::nullopt, 2), Slice(1, 4)});
  EXPECT_EQ(w.sizes(), (IntArray{2, 3}));
  EXPECT_EQ(w.strides(), (IntArray{10, 1}));
  EXPECT_EQ(Vals(w), (std::vector<double>{1, 2, 3, 11, 12, 13}));
  EXPECT_TRUE(w.is_alias_of(m));
  // Writing through the index view.
  w.fill_(0);
  EXPECT_EQ(Vals(m)[12], 0.0);
  EXPECT_EQ(Vals(m)[6], 6.0);
  // index_put_ with a slice writes the base.
  x.index_put_({Slice(1, std::nullopt, 2)}, Scalar(0.5));
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 0.5, 2, 0.5, 4, 0.5, 6, 0.5, 8, 0.5}));
}

// Regression test (was an engine bug).
TEST(Views, SliceAcceptsNoneLikeLibtorch) {
  EXPECT_TRUE((std::is_constructible_v<Slice, int, decltype(None), int>));
  EXPECT_TRUE((std::is_constructible_v<Slice, decltype(None), int>));
  // libtorch's idiom: x.index({Slice(0, None, 2)}) is x[0::2], a strided view.
  Tensor x = Iota({10});
  Tensor e = x.index({Slice(0, None, 2)});
  EXPECT_TRUE(e.is_alias_of(x));
  EXPECT_EQ(Vals(e), (std::vector<double>{0, 2, 4, 6, 8}));
  EXPECT_EQ(Vals(x.index({Slice(None, 3)})), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(Vals(x.index({Slice(-2, None)})), (std::vector<double>{8, 9}));
  EXPECT_EQ(Vals(x.index({Slice(None, None, 4)})), (std::vector<double>{0, 4, 8}));
}

TEST(Views, IndexWithIntegersEllipsisAndNone) {
  Tensor x = Iota({2, 3, 4});
  Tensor a = x.index({1, Slice(), 2});  // x[1, :, 2] = 12 + 4j + 2
  EXPECT_EQ(a.sizes(), (IntArray{3}));
  EXPECT_EQ(Vals(a), (std::vector<double>{14, 18, 22}));
  EXPECT_TRUE(a.is_alias_of(x));
  Tensor b = x.index({Ellipsis, 1});  // x[..., 1]
  EXPECT_EQ(b.sizes(), (IntArray{2, 3}));
  EXPECT_EQ(Vals(b), (std::vector<double>{1, 5, 9, 13, 17, 21}));
  Tensor c = x.index({None, Ellipsis, None});
  EXPECT_EQ(c.sizes(), (IntArray{1, 2, 3, 4, 1}));
  Tensor d = x.index({-1, -1});  // x[-1, -1] = [20, 21, 22, 23]
  EXPECT_EQ(Vals(d), (std::vector<double>{20, 21, 22, 23}));
  Tensor e = x.index({Slice(), None, 0});
  EXPECT_EQ(e.sizes(), (IntArray{2, 1, 4}));
  EXPECT_EQ(Vals(e), (std::vector<double>{0, 1, 2, 3, 12, 13, 14, 15}));
}

TEST(Views, SelectDropsDimAndShares) {
  Tensor x = Iota({3, 4});
  Tensor r = x.select(0, 1);
  EXPECT_EQ(r.sizes(), (IntArray{4}));
  EXPECT_EQ(ByteOffset(r, x), 4 * 4);
  EXPECT_EQ(Vals(r), (std::vector<double>{4, 5, 6, 7}));
  Tensor c = x.select(1, -1);
  EXPECT_EQ(c.strides(), (IntArray{4}));
  EXPECT_EQ(Vals(c), (std::vector<double>{3, 7, 11}));
  EXPECT_EQ(Vals(x[2]), (std::vector<double>{8, 9, 10, 11}));
  c.fill_(0);
  EXPECT_EQ(Vals(x)[7], 0.0);
  EXPECT_EQ(Vals(x)[6], 6.0);
  // Select down to a 0-dim view.
  Tensor e = x.select(0, 2).select(0, 1);
  EXPECT_EQ(e.dim(), 0);
  EXPECT_EQ(e.item<double>(), 9.0);
  EXPECT_TRUE(e.is_alias_of(x));
}

// ---------------------------------------------------------------- expand

TEST(Views, ExpandUsesStrideZero) {
  Tensor x = Iota({3, 1});
  Tensor e = x.expand({3, 4});
  EXPECT_EQ(e.sizes(), (IntArray{3, 4}));
  EXPECT_EQ(e.strides(), (IntArray{1, 0}));
  EXPECT_TRUE(e.is_alias_of(x));
  EXPECT_EQ(e.data_ptr(), x.data_ptr());
  EXPECT_EQ(Vals(e), (std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  // New leading dims.
  Tensor v = Iota({3});
  Tensor e2 = v.expand({2, 3});
  EXPECT_EQ(e2.strides(), (IntArray{0, 1}));
  EXPECT_EQ(Vals(e2), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  // -1 keeps a size.
  EXPECT_EQ(x.expand({-1, 5}).sizes(), (IntArray{3, 5}));
  // A write to the base shows in every expanded element.
  x.select(0, 1).fill_(7);
  EXPECT_EQ(Vals(e.select(0, 1)), (std::vector<double>{7, 7, 7, 7}));
  EXPECT_EQ(Vals(x.expand_as(zeros({3, 2}))), (std::vector<double>{0, 0, 7, 7, 2, 2}));
}

TEST(Views, ExpandIncompatibleMessage) {
  Tensor x = Iota({3, 2});
  std::string msg = ErrorOf([&] { x.expand({3, 4}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("[3, 4]"), HasSubstr("[3, 2]")));
}

TEST(Views, InPlaceOnExpandedTensorIsRefused) {
  // PyTorch: "unsupported operation: more than one element of the written-to tensor refers
  // to a single memory location". Silently writing would make the result depend on the
  // order the kernel visits the aliased elements.
  Tensor x = zeros({1});
  Tensor e = x.expand({3});
  EXPECT_THROW(e.add_(1), Error);
}

// Regression (silent wrong results): an in-place op whose source partially overlaps the
// destination used to compute a cascade instead of refusing: with x = [[0, 1], [2, 3]],
// x.add_(x.t()) left [[0, 3], [5, 6]] (x + x.T is [[0, 3], [3, 6]]), and for
// x = [0, 1, 2, 3, 4], x[1:].copy_(x[:4]) left [0, 0, 0, 0, 0]. PyTorch raises
// "unsupported operation: some elements of the input tensor and the written-to tensor refer
// to a single memory location. Please clone() the tensor before performing the operation."
TEST(Views, InPlaceWithPartiallyOverlappingSourceIsRefused) {
  Tensor x = Iota({2, 2});
  EXPECT_THROW(x.add_(x.t()), Error);
  Tensor y = Iota({5});
  EXPECT_THROW(y.slice(0, 1, std::nullopt).copy_(y.slice(0, 0, 4)), Error);
  // Fully overlapping (the same elements) is fine: x.add_(x) doubles.
  Tensor z = Iota({3});
  z.add_(z);
  EXPECT_EQ(Vals(z), (std::vector<double>{0, 2, 4}));
}

TEST(Views, InPlaceWithIdenticalAliasIsFine) {
  Tensor z = Iota({3});
  z.add_(z);
  EXPECT_EQ(Vals(z), (std::vector<double>{0, 2, 4}));
  Tensor w = Iota({2, 2});
  w.mul_(w.view({4}).view({2, 2}));
  EXPECT_EQ(Vals(w), (std::vector<double>{0, 1, 4, 9}));
  // Copy from a clone of an overlapping window is the supported way.
  Tensor y = Iota({5});
  y.slice(0, 1, std::nullopt).copy_(y.slice(0, 0, 4).clone());
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 0, 1, 2, 3}));
}

// ---------------------------------------------------------------- squeeze / unsqueeze / flatten

TEST(Views, SqueezeUnsqueeze) {
  Tensor x = Iota({1, 3, 1, 2});
  Tensor s = x.squeeze();
  EXPECT_EQ(s.sizes(), (IntArray{3, 2}));
  EXPECT_TRUE(s.is_alias_of(x));
  EXPECT_EQ(x.squeeze(2).sizes(), (IntArray{1, 3, 2}));
  EXPECT_EQ(x.squeeze(1).sizes(), (IntArray{1, 3, 1, 2}));  // not size 1: unchanged
  EXPECT_EQ(x.squeeze(-4).sizes(), (IntArray{3, 1, 2}));
  Tensor v = Iota({3});
  EXPECT_EQ(v.unsqueeze(0).sizes(), (IntArray{1, 3}));
  EXPECT_EQ(v.unsqueeze(1).sizes(), (IntArray{3, 1}));
  EXPECT_EQ(v.unsqueeze(-1).sizes(), (IntArray{3, 1}));
  EXPECT_TRUE(v.unsqueeze(0).is_alias_of(v));
  Tensor u = v.unsqueeze(1);
  u.mul_(10);
  EXPECT_EQ(Vals(v), (std::vector<double>{0, 10, 20}));
  EXPECT_THROW(v.unsqueeze(3), Error);
}

TEST(Views, UnsqueezeAndSqueezeOfNonContiguousStayViews) {
  Tensor x = Iota({3, 4});
  Tensor t = x.t();
  Tensor u = t.unsqueeze(1);
  EXPECT_EQ(u.sizes(), (IntArray{4, 1, 3}));
  EXPECT_TRUE(u.is_alias_of(x));
  EXPECT_EQ(Vals(u), Vals(t));
  Tensor s = u.squeeze(1);
  EXPECT_TRUE(s.is_alias_of(x));
  EXPECT_EQ(s.strides(), t.strides());
  Tensor sl = x.slice(1, 0, std::nullopt, 2).unsqueeze(0);  // [1, 3, 2], strides [?, 4, 2]
  EXPECT_TRUE(sl.is_alias_of(x));
  EXPECT_EQ(Vals(sl), (std::vector<double>{0, 2, 4, 6, 8, 10}));
}

TEST(Views, FlattenAndUnflatten) {
  Tensor x = Iota({2, 3, 4});
  Tensor f = x.flatten();
  EXPECT_EQ(f.sizes(), (IntArray{24}));
  EXPECT_TRUE(f.is_alias_of(x));
  EXPECT_EQ(x.flatten(1).sizes(), (IntArray{2, 12}));
  EXPECT_EQ(x.flatten(0, 1).sizes(), (IntArray{6, 4}));
  EXPECT_EQ(flatten(x, -2, -1).sizes(), (IntArray{2, 12}));
  EXPECT_EQ(scalar_tensor(2.0).flatten().sizes(), (IntArray{1}));
  // Flattening a permuted tensor must copy (values in the permuted order).
  Tensor p = x.permute({2, 0, 1});
  Tensor pf = p.flatten();
  EXPECT_FALSE(pf.is_alias_of(x));
  EXPECT_EQ(Vals(pf), Vals(p));
  // unflatten is the inverse, and a view.
  Tensor m = Iota({2, 12});
  Tensor u = m.unflatten(1, {3, 4});
  EXPECT_EQ(u.sizes(), (IntArray{2, 3, 4}));
  EXPECT_TRUE(u.is_alias_of(m));
  EXPECT_EQ(m.unflatten(1, {-1, 6}).sizes(), (IntArray{2, 2, 6}));
  EXPECT_EQ(m.unflatten(-1, {2, 2, 3}).sizes(), (IntArray{2, 2, 2, 3}));
  EXPECT_THROW(m.unflatten(1, {5, 3}), Error);
}

// ---------------------------------------------------------------- diagonal / as_strided / unfold

TEST(Views, DiagonalValuesAndWrites) {
  Tensor x = Iota({3, 3});
  Tensor d = x.diagonal();
  EXPECT_EQ(d.sizes(), (IntArray{3}));
  EXPECT_EQ(d.strides(), (IntArray{4}));
  EXPECT_TRUE(d.is_alias_of(x));
  EXPECT_EQ(Vals(d), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(Vals(x.diagonal(1)), (std::vector<double>{1, 5}));
  EXPECT_EQ(Vals(x.diagonal(-1)), (std::vector<double>{3, 7}));
  EXPECT_EQ(Vals(x.diagonal(2)), (std::vector<double>{2}));
  EXPECT_EQ(x.diagonal(3).numel(), 0);
  EXPECT_EQ(x.diagonal(-5).numel(), 0);
  // Non-square.
  Tensor r = Iota({3, 4});
  EXPECT_EQ(Vals(r.diagonal(1)), (std::vector<double>{1, 6, 11}));
  EXPECT_EQ(Vals(r.diagonal(-1)), (std::vector<double>{4, 9}));
  // Batched: dims 1 and 2 of [2, 2, 2] -> [2, 2] (batch first, then the diagonal).
  Tensor b = Iota({2, 2, 2});
  Tensor bd = b.diagonal(0, 1, 2);
  EXPECT_EQ(bd.sizes(), (IntArray{2, 2}));
  EXPECT_EQ(Vals(bd), (std::vector<double>{0, 3, 4, 7}));
  // Writes.
  d.fill_(-1);
  EXPECT_EQ(Vals(x), (std::vector<double>{-1, 1, 2, 3, -1, 5, 6, 7, -1}));
}

TEST(Views, AsStrided) {
  Tensor x = Iota({9});
  Tensor a = x.as_strided({2, 2}, {3, 1}, 1);
  EXPECT_EQ(a.sizes(), (IntArray{2, 2}));
  EXPECT_EQ(a.strides(), (IntArray{3, 1}));
  EXPECT_EQ(a.storage_offset(), 1);
  EXPECT_TRUE(a.is_alias_of(x));
  EXPECT_EQ(Vals(a), (std::vector<double>{1, 2, 4, 5}));
  // Overlapping windows (stride smaller than the row length).
  Tensor o = x.as_strided({3, 3}, {2, 1});
  EXPECT_EQ(Vals(o), (std::vector<double>{0, 1, 2, 2, 3, 4, 4, 5, 6}));
  // as_strided's offset is absolute in the storage, not relative to a view's offset.
  Tensor n = x.narrow(0, 4, 3);
  Tensor w = n.as_strided({2}, {1}, 0);
  EXPECT_EQ(Vals(w), (std::vector<double>{0, 1}));
  Tensor keep = n.as_strided({2}, {2});  // default offset: the view's own
  EXPECT_EQ(Vals(keep), (std::vector<double>{4, 6}));
  a.fill_(0);
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 0, 0, 3, 0, 0, 6, 7, 8}));
  // Out of the storage's bounds.
  EXPECT_THROW(x.as_strided({3, 3}, {3, 1}, 1), Error);
}

TEST(Views, Unfold) {
  Tensor x = Iota({7});
  Tensor u = x.unfold(0, 3, 2);
  EXPECT_EQ(u.sizes(), (IntArray{3, 3}));
  EXPECT_EQ(u.strides(), (IntArray{2, 1}));
  EXPECT_TRUE(u.is_alias_of(x));
  EXPECT_EQ(Vals(u), (std::vector<double>{0, 1, 2, 2, 3, 4, 4, 5, 6}));
  // The trailing element that does not fill a window is dropped.
  EXPECT_EQ(Vals(Iota({8}).unfold(0, 3, 2)), (std::vector<double>{0, 1, 2, 2, 3, 4, 4, 5, 6}));
  // Unfold of a matrix along dim 1 appends the window dim.
  Tensor m = Iota({2, 4});
  Tensor um = m.unfold(1, 2, 1);
  EXPECT_EQ(um.sizes(), (IntArray{2, 3, 2}));
  EXPECT_EQ(Vals(um), (std::vector<double>{0, 1, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7}));
  EXPECT_THROW(x.unfold(0, 8, 1), Error);
}

TEST(Views, SplitChunkUnbindAreViews) {
  Tensor x = Iota({5, 2});
  auto parts = x.split(2);
  ASSERT_EQ(parts.size(), 3u);
  for (const Tensor& p : parts) EXPECT_TRUE(p.is_alias_of(x));
  EXPECT_EQ(parts[2].sizes(), (IntArray{1, 2}));
  EXPECT_EQ(ByteOffset(parts[1], x), 4 * 4);
  auto rows = x.unbind(0);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(Vals(rows[3]), (std::vector<double>{6, 7}));
  EXPECT_TRUE(rows[3].is_alias_of(x));
  auto cols = x.chunk(2, 1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(Vals(cols[1]), (std::vector<double>{1, 3, 5, 7, 9}));
  cols[1].fill_(0);
  EXPECT_EQ(Vals(x)[9], 0.0);
}

// ---------------------------------------------------------------- contiguous / clone / detach

TEST(Views, ContiguousReturnsSelfOrCopy) {
  Tensor x = Iota({3, 4});
  Tensor c = x.contiguous();
  EXPECT_EQ(c.data_ptr(), x.data_ptr());
  Tensor t = x.t();
  EXPECT_FALSE(t.is_contiguous());
  Tensor tc = t.contiguous();
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_FALSE(tc.is_alias_of(x));
  EXPECT_EQ(tc.strides(), (IntArray{3, 1}));
  EXPECT_EQ(Vals(tc), Vals(t));
  // Expanded -> contiguous materialises the repeats.
  Tensor e = Iota({3}).expand({2, 3}).contiguous();
  EXPECT_EQ(e.strides(), (IntArray{3, 1}));
  EXPECT_EQ(Vals(e), (std::vector<double>{0, 1, 2, 0, 1, 2}));
}

TEST(Views, CloneHasNewStorage) {
  Tensor x = Iota({2, 3});
  Tensor c = x.clone();
  EXPECT_FALSE(c.is_alias_of(x));
  EXPECT_NE(c.data_ptr(), x.data_ptr());
  EXPECT_EQ(Vals(c), Vals(x));
  c.fill_(9);
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(c._version(), 1u);
  EXPECT_EQ(x._version(), 0u);
  // Clone of a non-contiguous view copies only the viewed elements.
  Tensor cv = x.t().clone();
  EXPECT_FALSE(cv.is_alias_of(x));
  EXPECT_EQ(Vals(cv), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_FALSE(c.is_view());
}

TEST(Views, DetachSharesStorageAndVersion) {
  Tensor x = Iota({4}).requires_grad_();
  Tensor d = x.detach();
  EXPECT_TRUE(d.is_alias_of(x));
  EXPECT_EQ(d.data_ptr(), x.data_ptr());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(x.requires_grad());
  const uint64_t v0 = x._version();
  EXPECT_EQ(d._version(), v0);
  d.add_(1);  // allowed: d does not require grad
  EXPECT_EQ(x._version(), v0 + 1);
  EXPECT_EQ(d._version(), v0 + 1);
  EXPECT_EQ(Vals(x), (std::vector<double>{1, 2, 3, 4}));
  // clone().detach(): new memory and no history.
  Tensor cd = x.clone().detach();
  EXPECT_FALSE(cd.is_alias_of(x));
  EXPECT_FALSE(cd.requires_grad());
}

TEST(Views, VersionCounterSharedByAllViews) {
  Tensor x = Iota({3, 4});
  Tensor v = x.view({12});
  Tensor t = x.t();
  Tensor s = x.select(0, 1);
  const uint64_t v0 = x._version();
  s.mul_(3);
  EXPECT_EQ(x._version(), v0 + 1);
  EXPECT_EQ(v._version(), v0 + 1);
  EXPECT_EQ(t._version(), v0 + 1);
  t.zero_();
  EXPECT_EQ(v._version(), v0 + 2);
  // Out-of-place ops do not bump it.
  Tensor y = x + 1;
  (void)y;
  EXPECT_EQ(x._version(), v0 + 2);
}

TEST(Views, WritesUnderNoGradThroughViewsOfGradTensor) {
  Tensor w = Iota({2, 3}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor row = w.select(0, 0);
    row.fill_(-1);
    w.t().select(0, 2).mul_(2);  // column 2 of w
  }
  EXPECT_EQ(Vals(w), (std::vector<double>{-1, -1, -2, 3, 4, 10}));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
}

TEST(Views, ToSameDtypeAliasesOtherDtypeCopies) {
  Tensor x = Iota({3});
  EXPECT_TRUE(x.to(kFloat32).is_alias_of(x));
  EXPECT_FALSE(x.to(kFloat32, /*non_blocking=*/false, /*copy=*/true).is_alias_of(x));
  EXPECT_FALSE(x.to(kFloat64).is_alias_of(x));
}

TEST(Views, ZeroDimAndEmptyViews) {
  Tensor s = scalar_tensor(4.0);
  Tensor v = s.view({1});
  EXPECT_EQ(v.sizes(), (IntArray{1}));
  EXPECT_TRUE(v.is_alias_of(s));
  EXPECT_EQ(v.view({}).dim(), 0);
  EXPECT_EQ(s.reshape({1, 1}).sizes(), (IntArray{1, 1}));
  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.view({3, 0}).sizes(), (IntArray{3, 0}));
  EXPECT_EQ(e.reshape({-1, 3}).sizes(), (IntArray{0, 3}));
  EXPECT_EQ(e.t().sizes(), (IntArray{3, 0}));
}
