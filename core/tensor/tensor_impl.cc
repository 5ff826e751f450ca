#include "core/tensor/tensor_impl.h"

#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace anvil {

IntArray contiguous_strides(const IntArray& sizes) {
  IntArray strides(sizes.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    // A zero-size dim leaves numel 0 but not the strides: [0, 2^40, 2^40] overflows them
    // (PyTorch refuses it too: "Storage size calculation overflowed").
    if (i > 0 && __builtin_mul_overflow(s, std::max<int64_t>(sizes[i], 1), &s)) [[unlikely]] {
      throw Error(detail::StrCat("shape ", shape_str(sizes), " is too large: its strides overflow int64"));
    }
  }
  return strides;
}

int64_t numel_of(const IntArray& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    ANVIL_CHECK(s >= 0, "negative dimension ", s, " in shape");
    ANVIL_CHECK(s == 0 || n <= INT64_MAX / s, "shape has more than 2^63 elements");
    n *= s;
  }
  return n;
}

TensorImpl::TensorImpl(Storage storage, IntArray sizes, IntArray strides, int64_t offset, ScalarType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  ANVIL_INTERNAL_ASSERT(sizes_.size() == strides_.size());
  RefreshDerived();
}

void TensorImpl::RefreshDerived() {
  numel_ = numel_of(sizes_);
  contiguous_ = true;
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      contiguous_ = false;
      break;
    }
    expected *= sizes_[i];
  }
}

}  // namespace anvil
