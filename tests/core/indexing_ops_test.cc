// Forward values of the joining, indexing, advanced indexing, masks and sorting (core/ops/indexing.cc),
// against references that do not come from the engine: float64 std:: math, naive loops,
// hand-worked examples (many from PyTorch's documentation) and PyTorch's documented semantics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "tests/core/ops_test_util.h"
#include "tests/core/test_util.h"

using namespace anvil;
using namespace anvil::test;
using namespace anvil::ops_test;
using ::testing::HasSubstr;

TEST(Joining, CatStack) {
  Tensor a = Iota({2, 3});
  Tensor b = Iota({1, 3}) + 100;
  Tensor c0 = cat({a, b}, 0);
  EXPECT_EQ(c0.sizes(), (IntArray{3, 3}));
  EXPECT_EQ(Vals(c0), (std::vector<double>{0, 1, 2, 3, 4, 5, 100, 101, 102}));
  Tensor c1 = cat({a, Iota({2, 1}) + 10}, 1);
  EXPECT_EQ(Vals(c1), (std::vector<double>{0, 1, 2, 10, 3, 4, 5, 11}));
  EXPECT_EQ(Vals(cat({a, a.t().t()}, -1)).size(), 12u);
  // Non-contiguous inputs.
  EXPECT_EQ(Vals(cat({a.t(), a.t()}, 1)), (std::vector<double>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
  // dtype promotion across inputs (PyTorch's cat promotes).
  Tensor mixed = cat({I64({1, 2}), F32({0.5})});
  EXPECT_EQ(mixed.dtype(), kFloat32);
  EXPECT_EQ(Vals(mixed), (std::vector<double>{1, 2, 0.5}));
  // Legacy: 1-D empty tensors are skipped.
  EXPECT_EQ(cat({a, zeros({0})}, 0).sizes(), (IntArray{2, 3}));
  // Result is new memory.
  EXPECT_FALSE(c0.is_alias_of(a));
  Tensor s0 = stack({F32({1, 2}), F32({3, 4}), F32({5, 6})});
  EXPECT_EQ(s0.sizes(), (IntArray{3, 2}));
  EXPECT_EQ(Vals(s0), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor s1 = stack({F32({1, 2}), F32({3, 4}), F32({5, 6})}, 1);
  EXPECT_EQ(s1.sizes(), (IntArray{2, 3}));
  EXPECT_EQ(Vals(s1), (std::vector<double>{1, 3, 5, 2, 4, 6}));
  EXPECT_EQ(stack({a, a}, -1).sizes(), (IntArray{2, 3, 2}));
}

TEST(Joining, SplitChunk) {
  Tensor x = Iota({5, 2});
  auto s = split(x, 2);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].sizes(), (IntArray{2, 2}));
  EXPECT_EQ(s[2].sizes(), (IntArray{1, 2}));
  EXPECT_EQ(Vals(s[1]), (std::vector<double>{4, 5, 6, 7}));
  auto sw = split_with_sizes(x, {1, 4});
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(Vals(sw[0]), (std::vector<double>{0, 1}));
  EXPECT_EQ(sw[1].sizes(), (IntArray{4, 2}));
  auto c = chunk(x, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].size(0), 2);
  EXPECT_EQ(c[2].size(0), 1);
  // torch.chunk(6 rows, 4) gives 3 chunks of 2: chunks may be fewer than asked.
  auto c6 = chunk(Iota({6}), 4);
  ASSERT_EQ(c6.size(), 3u);
  for (const Tensor& t : c6) EXPECT_EQ(t.numel(), 2);
  auto cols = split(x, 1, 1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(Vals(cols[1]), (std::vector<double>{1, 3, 5, 7, 9}));
  EXPECT_EQ(Vals(cat(s, 0)), Vals(x));
}

// ====================================================================== gather / scatter / index_select

TEST(Indexing, GatherDocExample) {
  // torch.gather docs: t = [[1, 2], [3, 4]]; gather(t, 1, [[0, 0], [1, 0]]) = [[1, 1], [4, 3]].
  Tensor t = F32({1, 2, 3, 4}, IntArray{2, 2});
  Tensor idx = I64({0, 0, 1, 0}, IntArray{2, 2});
  EXPECT_EQ(Vals(gather(t, 1, idx)), (std::vector<double>{1, 1, 4, 3}));
  EXPECT_EQ(Vals(t.gather(0, I64({1, 0}, IntArray{1, 2}))), (std::vector<double>{3, 2}));
  // Index smaller than input in the other dim.
  Tensor x = Iota({3, 4});
  Tensor g = gather(x, 1, I64({3, 0}, IntArray{2, 1}));
  EXPECT_EQ(g.sizes(), (IntArray{2, 1}));
  EXPECT_EQ(Vals(g), (std::vector<double>{3, 4}));
  // Non-contiguous input.
  EXPECT_EQ(Vals(gather(x.t(), 0, I64({2, 1, 0}, IntArray{1, 3}))), (std::vector<double>{2, 5, 8}));
  // int32 index is accepted.
  EXPECT_EQ(Vals(gather(t, 1, idx.to(kInt32))), (std::vector<double>{1, 1, 4, 3}));
}

TEST(Indexing, ScatterDocExample) {
  // torch.Tensor.scatter_ docs: src = arange(1, 11).reshape(2, 5), index = [[0, 1, 2, 0]],
  // zeros(3, 5).scatter_(0, index, src) = [[1,0,0,4,0],[0,2,0,0,0],[0,0,3,0,0]].
  Tensor src = (Iota({2, 5}) + 1);
  Tensor index = I64({0, 1, 2, 0}, IntArray{1, 4});
  Tensor out = scatter(zeros({3, 5}), 0, index, src);
  EXPECT_EQ(Vals(out), (std::vector<double>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));
  // Docs, dim 1: index [[0, 1, 2], [0, 1, 4]] -> [[1,2,3,0,0],[6,7,0,0,8],[0,0,0,0,0]].
  Tensor out1 = scatter(zeros({3, 5}), 1, I64({0, 1, 2, 0, 1, 4}, IntArray{2, 3}), src);
  EXPECT_EQ(Vals(out1), (std::vector<double>{1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0}));
  // Scalar value form.
  EXPECT_EQ(Vals(scatter(zeros({4}), 0, I64({1, 3}), 2.5)), (std::vector<double>{0, 2.5, 0, 2.5}));
  // In-place form writes self.
  Tensor z = zeros({3, 5});
  z.scatter_(0, index, src);
  EXPECT_EQ(Vals(z), Vals(out));
}

TEST(Indexing, ScatterAddAccumulatesDuplicates) {
  Tensor r = scatter_add(zeros({5}), 0, I64({0, 1, 0, 4}), F32({1, 2, 3, 4}));
  EXPECT_EQ(Vals(r), (std::vector<double>{4, 2, 0, 0, 4}));
  Tensor base = ones({2, 3});
  base.scatter_add_(1, I64({2, 2, 0, 1}, IntArray{2, 2}), F32({1, 2, 3, 4}, IntArray{2, 2}));
  EXPECT_EQ(Vals(base), (std::vector<double>{1, 1, 4, 4, 5, 1}));
}

TEST(Indexing, IndexSelect) {
  Tensor x = Iota({3, 4});
  Tensor r = index_select(x, 0, I64({2, 0, 2}));
  EXPECT_EQ(r.sizes(), (IntArray{3, 4}));
  EXPECT_EQ(Vals(r), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  Tensor c = x.index_select(1, I64({3, 1}));
  EXPECT_EQ(Vals(c), (std::vector<double>{3, 1, 7, 5, 11, 9}));
  EXPECT_EQ(Vals(index_select(x.t(), 0, I64({1}))), (std::vector<double>{1, 5, 9}));
  EXPECT_EQ(Vals(index_select(x, -1, I64({0}))), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(index_select(x, 0, I64({})).sizes(), (IntArray{0, 4}));
  EXPECT_FALSE(r.is_alias_of(x));
}

TEST(Indexing, IndexAddDocExample) {
  // torch.Tensor.index_add_ docs.
  Tensor x = ones({5, 3});
  Tensor t = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, IntArray{3, 3});
  x.index_add_(0, I64({0, 4, 2}), t);
  EXPECT_EQ(Vals(x), (std::vector<double>{2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7}));
  // Duplicates accumulate; alpha scales.
  Tensor y = index_add(zeros({3}), 0, I64({1, 1, 2}), F32({1, 2, 3}), 2);
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 6, 6}));
  // Along dim 1.
  Tensor z = index_add(zeros({2, 3}), 1, I64({2, 0}), F32({1, 2, 3, 4}, IntArray{2, 2}));
  EXPECT_EQ(Vals(z), (std::vector<double>{2, 0, 1, 4, 0, 3}));
}

// ====================================================================== advanced indexing

TEST(AdvancedIndexing, NonAdjacentIndexDimsGoFirst) {
  Tensor x = Iota({5, 6, 7});
  Tensor idx = I64({0, 2, 4}), idx2 = I64({1, 3, 5});
  Tensor r = x.index({idx, Slice(), idx2});  // PyTorch: [3, 6]
  ASSERT_EQ(r.sizes(), (IntArray{3, 6}));
  std::vector<double> rv = Vals(r);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 6; ++j) {
      const int64_t a = Longs(idx)[k], c = Longs(idx2)[k];
      EXPECT_EQ(rv[k * 6 + j], a * 42 + j * 7 + c);
    }
}

TEST(AdvancedIndexing, AdjacentIndexDimsStayInPlace) {
  Tensor x = Iota({5, 6, 7});
  Tensor idx = I64({0, 2, 5}), idx2 = I64({1, 3, 6});
  Tensor r = x.index({Slice(), idx, idx2});  // PyTorch: [5, 3]
  ASSERT_EQ(r.sizes(), (IntArray{5, 3}));
  std::vector<double> rv = Vals(r);
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(rv[i * 3 + k], i * 42 + Longs(idx)[k] * 7 + Longs(idx2)[k]);
  // One index tensor in the middle: [5, 2, 7].
  Tensor m = x.index({Slice(), I64({5, 0})});
  ASSERT_EQ(m.sizes(), (IntArray{5, 2, 7}));
  EXPECT_EQ(Vals(m)[(1 * 2 + 0) * 7 + 3], 1 * 42 + 5 * 7 + 3);
  // Leading index tensor: x[idx] -> [3, 6, 7].
  Tensor l = x.index({I64({4, 4, 1})});
  ASSERT_EQ(l.sizes(), (IntArray{3, 6, 7}));
  EXPECT_EQ(Vals(l)[(2 * 6 + 5) * 7 + 6], 1 * 42 + 5 * 7 + 6);
}

TEST(AdvancedIndexing, IndexTensorsBroadcast) {
  Tensor x = Iota({5, 6, 7});
  Tensor rows = I64({0, 3}, IntArray{2, 1});
  Tensor cols = I64({1, 2, 5});
  Tensor r = x.index({rows, cols});  // [2, 3, 7]
  ASSERT_EQ(r.sizes(), (IntArray{2, 3, 7}));
  std::vector<double> rv = Vals(r);
  const int64_t rr[2] = {0, 3}, cc[3] = {1, 2, 5};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int k = 0; k < 7; ++k) EXPECT_EQ(rv[(a * 3 + b) * 7 + k], rr[a] * 42 + cc[b] * 7 + k);
  // Non-adjacent broadcast: x[rows, :, cols] -> [2, 3, 6].
  Tensor n = x.index({rows, Slice(), cols});
  ASSERT_EQ(n.sizes(), (IntArray{2, 3, 6}));
  EXPECT_EQ(Vals(n)[(1 * 3 + 2) * 6 + 4], 3 * 42 + 4 * 7 + 5);
  // The vectorised gather of coordinates: t[c[:,0], c[:,1], c[:,2]].
  Tensor coords = I64({0, 0, 0, 4, 5, 6, 2, 3, 1}, IntArray{3, 3});
  Tensor picked = x.index({coords.select(1, 0), coords.select(1, 1), coords.select(1, 2)});
  EXPECT_EQ(Vals(picked), (std::vector<double>{0, 4 * 42 + 5 * 7 + 6, 2 * 42 + 3 * 7 + 1}));
}

TEST(AdvancedIndexing, MixedWithSlicesAndNegativeIndices) {
  Tensor x = Iota({5, 6, 7});
  Tensor r = x.index({Slice(1, 4), I64({0, -1})});  // [3, 2, 7]; -1 means 5
  ASSERT_EQ(r.sizes(), (IntArray{3, 2, 7}));
  EXPECT_EQ(Vals(r)[(0 * 2 + 1) * 7 + 0], 1 * 42 + 5 * 7);
  EXPECT_EQ(Vals(r)[(2 * 2 + 0) * 7 + 6], 3 * 42 + 0 * 7 + 6);
  Tensor s = x.index({Slice(std::nullopt, std::nullopt, 2), Slice(), I64({6})});  // [3, 6, 1]
  EXPECT_EQ(s.sizes(), (IntArray{3, 6, 1}));
  EXPECT_EQ(Vals(s)[5 * 1 + 0 + 2 * 6], 4 * 42 + 5 * 7 + 6);
  // Ellipsis then an index tensor on the last dim.
  Tensor e = x.index({Ellipsis, I64({0, 6})});
  EXPECT_EQ(e.sizes(), (IntArray{5, 6, 2}));
  // Index result is a copy, not a view.
  EXPECT_FALSE(r.is_alias_of(x));
  // operator[] with a tensor.
  EXPECT_EQ(Vals(Iota({4})[I64({3, 3, 0})]), (std::vector<double>{3, 3, 0}));
  // 2-D index tensor on a 1-D tensor gives its shape.
  EXPECT_EQ(Iota({4}).index({I64({0, 1, 2, 3}, IntArray{2, 2})}).sizes(), (IntArray{2, 2}));
}

TEST(AdvancedIndexing, IntegersApplyAsSelectBeforeIndexTensors) {
  // PyTorch (unlike NumPy) applies integer indices as select() first, so x[1, :, idx] is
  // x[1][:, idx] with shape [6, len], and x[idx, 1] is x[:, 1][idx].
  Tensor x = Iota({5, 6, 7});
  Tensor idx = I64({0, 4});
  Tensor a = x.index({1, Slice(), idx});
  ASSERT_EQ(a.sizes(), (IntArray{6, 2}));
  EXPECT_EQ(Vals(a.select(0, 2)), (std::vector<double>{1 * 42 + 2 * 7 + 0, 1 * 42 + 2 * 7 + 4}));
  Tensor b = x.index({idx, 1});
  ASSERT_EQ(b.sizes(), (IntArray{2, 7}));
  EXPECT_EQ(Vals(b.select(1, 3)), (std::vector<double>{0 * 42 + 7 + 3, 4 * 42 + 7 + 3}));
  EXPECT_EQ(x.index({Slice(), idx, 1}).sizes(), (IntArray{5, 2}));
  EXPECT_EQ(x.index({Ellipsis, idx, Slice()}).sizes(), (IntArray{5, 2, 7}));
  // None inserts a dim before the indexed one.
  Tensor m = Iota({3, 4});
  EXPECT_EQ(m.index({None, I64({0, 2}), Ellipsis}).sizes(), (IntArray{1, 2, 4}));
  // Integer plus bool mask.
  Tensor mask = Bool({true, false, true, false});
  EXPECT_EQ(Vals(m.index({1, mask})), (std::vector<double>{4, 6}));
  EXPECT_EQ(Vals(m.index({Bool({true, false, true}), 1})), (std::vector<double>{1, 9}));
  Tensor y = zeros({3, 4});
  y.index_put_({1, mask}, Scalar(5.0));
  y.index_put_({I64({0, 2}), Slice(1, 3)}, F32({7, 8}));
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 7, 8, 0, 5, 0, 5, 0, 0, 7, 8, 0}));
}

TEST(AdvancedIndexing, BoolMasks) {
  Tensor x = Iota({3, 4});
  Tensor m = x > 6.5;
  Tensor r = x.index({m});
  EXPECT_EQ(r.sizes(), (IntArray{5}));
  EXPECT_EQ(Vals(r), (std::vector<double>{7, 8, 9, 10, 11}));
  // A row mask.
  Tensor rows = x.index({Bool({true, false, true})});
  EXPECT_EQ(rows.sizes(), (IntArray{2, 4}));
  EXPECT_EQ(Vals(rows), (std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11}));
  // A column mask after a slice.
  Tensor cols = x.index({Slice(), Bool({false, true, false, true})});
  EXPECT_EQ(cols.sizes(), (IntArray{3, 2}));
  EXPECT_EQ(Vals(cols), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  // Mask with no hits.
  EXPECT_EQ(x.index({x > 100}).numel(), 0);
  EXPECT_EQ(Vals(x[x < 2]), (std::vector<double>{0, 1}));
}

TEST(AdvancedIndexing, IndexPutWithoutAndWithAccumulate) {
  Tensor x = zeros({5});
  x.index_put_({I64({0, 2})}, F32({7, 8}));
  EXPECT_EQ(Vals(x), (std::vector<double>{7, 0, 8, 0, 0}));
  // Duplicates without accumulate: one of the values lands (both equal here: well defined).
  Tensor y = zeros({3});
  y.index_put_({I64({1, 1})}, F32({4, 4}));
  EXPECT_EQ(Vals(y), (std::vector<double>{0, 4, 0}));
  // With accumulate, duplicates add up.
  Tensor z = zeros({3});
  index_put_(z, {I64({0, 0, 2, 0})}, F32({1, 2, 3, 4}), /*accumulate=*/true);
  EXPECT_EQ(Vals(z), (std::vector<double>{7, 0, 3}));
  // Accumulate adds to the existing content.
  Tensor w = ones({3});
  index_put_(w, {I64({2, 2})}, F32({1, 1}), true);
  EXPECT_EQ(Vals(w), (std::vector<double>{1, 1, 3}));
  // Out-of-place form leaves the input alone.
  Tensor o = index_put(ones({3}), {I64({1})}, F32({5}));
  EXPECT_EQ(Vals(o), (std::vector<double>{1, 5, 1}));
  // 2-D with two index tensors and a broadcast scalar value.
  Tensor m = zeros({3, 3});
  m.index_put_({I64({0, 1, 2}), I64({2, 1, 0})}, Scalar(1.0));
  EXPECT_EQ(Vals(m), (std::vector<double>{0, 0, 1, 0, 1, 0, 1, 0, 0}));
  // Rows assigned from a broadcast row.
  Tensor rows = zeros({3, 2});
  rows.index_put_({I64({2, 0})}, F32({5, 6}));
  EXPECT_EQ(Vals(rows), (std::vector<double>{5, 6, 0, 0, 5, 6}));
  // Bool mask assignment.
  Tensor b = Iota({4});
  b.index_put_({b > 1.5}, Scalar(0.0));
  EXPECT_EQ(Vals(b), (std::vector<double>{0, 1, 0, 0}));
  // Through a slice: x[1:3, idx] = v writes the base.
  Tensor base = zeros({4, 3});
  base.index_put_({Slice(1, 3), I64({0, 2})}, F32({1, 2, 3, 4}, IntArray{2, 2}));
  EXPECT_EQ(Vals(base), (std::vector<double>{0, 0, 0, 1, 0, 2, 3, 0, 4, 0, 0, 0}));
  // dtype of values is converted to self's.
  Tensor iv = zeros({3}, kInt64);
  iv.index_put_({I64({1})}, F32({2.0}));
  EXPECT_EQ(Longs(iv), (std::vector<int64_t>{0, 2, 0}));
}

TEST(AdvancedIndexing, AccumulateLargeRandomMatchesLoop) {
  manual_seed(4);
  Tensor idx = randint(0, 50, {5000});
  Tensor vals = rand({5000}, kFloat64);
  Tensor acc = zeros({50}, kFloat64);
  index_put_(acc, {idx}, vals, true);
  std::vector<double> want(50, 0.0);
  auto iv = Longs(idx);
  auto vv = Vals(vals);
  for (size_t i = 0; i < iv.size(); ++i) want[iv[i]] += vv[i];
  ExpectClose(Vals(acc), want, 1e-12, 1e-12, "index_put accumulate");
  // Same through scatter_add and index_add.
  ExpectClose(Vals(scatter_add(zeros({50}, kFloat64), 0, idx, vals)), want, 1e-12, 1e-12, "scatter_add");
  ExpectClose(Vals(index_add(zeros({50}, kFloat64), 0, idx, vals)), want, 1e-12, 1e-12, "index_add");
}

// ====================================================================== masks

TEST(Masks, MaskedFillSelect) {
  Tensor x = Iota({2, 3});
  Tensor m = Bool({true, false, true}, IntArray{1, 3});
  EXPECT_EQ(Vals(x.masked_fill(m, -1)), (std::vector<double>{-1, 1, -1, -1, 4, -1}));
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  x.masked_fill_(x > 3, 0.5);
  EXPECT_EQ(Vals(x), (std::vector<double>{0, 1, 2, 3, 0.5, 0.5}));
  EXPECT_EQ(masked_fill(I64({1, 2}), Bool({true, false}), 9).dtype(), kInt64);
  Tensor y = Iota({2, 3});
  Tensor sel = y.masked_select(m);
  EXPECT_EQ(sel.sizes(), (IntArray{4}));
  EXPECT_EQ(Vals(sel), (std::vector<double>{0, 2, 3, 5}));
  EXPECT_EQ(Vals(masked_select(F32({1, 2, 3}), Bool({false, true, true}))), (std::vector<double>{2, 3}));
}

TEST(Masks, Nonzero) {
  Tensor x = F32({0, 1, 2, 0}, IntArray{2, 2});
  Tensor nz = x.nonzero();
  EXPECT_EQ(nz.dtype(), kInt64);
  EXPECT_EQ(nz.sizes(), (IntArray{2, 2}));
  EXPECT_EQ(Longs(nz), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(zeros({3, 2}).nonzero().sizes(), (IntArray{0, 2}));
  EXPECT_EQ(Longs(nonzero(Bool({false, true, true}))), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Longs(x.t().nonzero()), (std::vector<int64_t>{0, 1, 1, 0}));
  Tensor t3 = zeros({2, 2, 2});
  t3.index_put_({I64({1}), I64({0}), I64({1})}, Scalar(3.0));
  EXPECT_EQ(Longs(t3.nonzero()), (std::vector<int64_t>{1, 0, 1}));
}

// ====================================================================== sort / topk / one_hot

TEST(Sorting, SortArgsort) {
  Tensor x = F32({3, 1, 4, 1.5, 9, 2});
  auto [v, i] = sort(x);
  EXPECT_EQ(Vals(v), (std::vector<double>{1, 1.5, 2, 3, 4, 9}));
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{1, 3, 5, 0, 2, 4}));
  auto [vd, id] = sort(x, 0, true);
  EXPECT_EQ(Vals(vd), (std::vector<double>{9, 4, 3, 2, 1.5, 1}));
  EXPECT_EQ(Longs(id), (std::vector<int64_t>{4, 2, 0, 5, 3, 1}));
  EXPECT_EQ(Longs(argsort(x)), Longs(i));
  // Along dim 0 of a matrix, and along the last dim.
  Tensor m = F32({3, 1, 2, 5, 0, 4}, IntArray{2, 3});
  auto [v0, i0] = sort(m, 0);
  EXPECT_EQ(Vals(v0), (std::vector<double>{3, 0, 2, 5, 1, 4}));
  EXPECT_EQ(Longs(i0), (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  auto [v1, i1] = sort(m, -1);
  EXPECT_EQ(Vals(v1), (std::vector<double>{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(Longs(i1), (std::vector<int64_t>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(Longs(argsort(I64({5, -2, 7}), 0, true)), (std::vector<int64_t>{2, 0, 1}));
}

TEST(Sorting, NaNGoesLastAscendingFirstDescending) {
  Tensor x = F32({3, static_cast<float>(kNaN), 1, 2});
  auto [v, i] = sort(x);
  std::vector<double> vv = Vals(v);
  EXPECT_EQ(vv[0], 1);
  EXPECT_EQ(vv[1], 2);
  EXPECT_EQ(vv[2], 3);
  EXPECT_TRUE(std::isnan(vv[3]));
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{2, 3, 0, 1}));
  auto [vd, idd] = sort(x, 0, true);
  std::vector<double> vdv = Vals(vd);
  EXPECT_TRUE(std::isnan(vdv[0]));
  EXPECT_EQ(vdv[1], 3);
  EXPECT_EQ(Longs(idd), (std::vector<int64_t>{1, 0, 3, 2}));
  // topk(largest) treats NaN as the largest.
  auto [tv, ti] = topk(x, 2);
  EXPECT_TRUE(std::isnan(Vals(tv)[0]));
  EXPECT_EQ(Vals(tv)[1], 3);
  EXPECT_EQ(Longs(ti), (std::vector<int64_t>{1, 0}));
}

TEST(Sorting, Topk) {
  Tensor x = F32({1, 5, 3, 4, 2});
  auto [v, i] = topk(x, 2);
  EXPECT_EQ(Vals(v), (std::vector<double>{5, 4}));
  EXPECT_EQ(Longs(i), (std::vector<int64_t>{1, 3}));
  auto [vs, is] = topk(x, 3, -1, /*largest=*/false);
  EXPECT_EQ(Vals(vs), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Longs(is), (std::vector<int64_t>{0, 4, 2}));
  Tensor m = F32({1, 9, 3, 8, 2, 7}, IntArray{3, 2});
  auto [mv, mi] = topk(m, 1, 0);
  EXPECT_EQ(mv.sizes(), (IntArray{1, 2}));
  EXPECT_EQ(Vals(mv), (std::vector<double>{3, 9}));
  EXPECT_EQ(Longs(mi), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(std::get<0>(topk(x, 0)).numel(), 0);
}

TEST(Sorting, OneHot) {
  Tensor o = one_hot(I64({0, 2, 1}), 4);
  EXPECT_EQ(o.dtype(), kInt64);
  EXPECT_EQ(o.sizes(), (IntArray{3, 4}));
  EXPECT_EQ(Longs(o), (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0}));
  Tensor inferred = one_hot(I64({1, 3}));
  EXPECT_EQ(inferred.sizes(), (IntArray{2, 4}));
  EXPECT_EQ(one_hot(I64({0, 1, 1, 0}, IntArray{2, 2}), 2).sizes(), (IntArray{2, 2, 2}));
}

// ====================================================================== dtype conversion / copy_
