// TensorImpl: the state behind a Tensor handle — a window (sizes, strides, offset) onto a
// shared Storage, its dtype, and, when autograd is involved, its autograd metadata.
//
// Ownership: a Tensor holds a shared_ptr<TensorImpl>; views hold their own TensorImpl that
// shares the Storage (and, through it, the version counter — see NOTE [ Version counter ]).
// Thread-safety: like PyTorch, a TensorImpl may be read from several threads but must not
// be mutated concurrently.
#pragma once

#include <array>
#include <vector>

// GCC 12 at -O2 and above reports a moved-from empty InlinedVector's storage as "may be used
// uninitialized" (a false positive: abseil-cpp issue 1779); the warning is attributed to
// Abseil's header, so it is silenced for that header alone.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <absl/container/inlined_vector.h>
#include <absl/types/span.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/storage.h"

namespace anvil {

class Tensor;
namespace autograd {
class Node;
}

// Sizes and strides: up to kInlineDims dimensions live inside the object (no heap
// allocation per tensor, nor per temporary shape in shape inference); more spill to the heap.
inline constexpr size_t kInlineDims = 6;

// A non-owning view of int64 values (libtorch's IntArrayRef): a pointer and a length.
using IntArrayRef = absl::Span<const int64_t>;

// Sizes, strides and dims, stored inline (above). Every shape or dims argument of the API is
// an IntArray, which takes what C++ code holds a shape in, as libtorch's IntArrayRef does: a
// braced list, a std::vector<int64_t>, a std::array<int64_t, N>, or an IntArrayRef (pointer
// and length): randn(shape) with `std::vector<int64_t> shape` compiles.
class IntArray : public absl::InlinedVector<int64_t, kInlineDims> {
  using Base = absl::InlinedVector<int64_t, kInlineDims>;

 public:
  using Base::Base;
  IntArray() = default;
  IntArray(const Base& b) : Base(b) {}
  IntArray(Base&& b) : Base(std::move(b)) {}
  IntArray(IntArrayRef values) : Base(values.begin(), values.end()) {}
  IntArray(const std::vector<int64_t>& values) : Base(values.begin(), values.end()) {}
  template <size_t N>
  IntArray(const std::array<int64_t, N>& values) : Base(values.begin(), values.end()) {}
};

// NOTE [ View tracking ]
// A view remembers its root base and where it sits in it, expressed against the base's
// *contiguous* layout (rel_*). Autograd needs this when an in-place op writes through a
// view of a tensor that has history: the base's history is rebased (CopySlices) and the
// view's grad_fn is regenerated as a strided window of the base.
struct ViewInfo {
  std::shared_ptr<class TensorImpl> base;  // the root (never itself a view)
  IntArray rel_sizes, rel_strides;
  int64_t rel_offset = 0;
  bool rel_valid = true;         // false when the window cannot be expressed that way
  uint64_t grad_fn_version = 0;  // storage version when grad_fn was last (re)built
  // One of several views a single call returned (split, chunk, unbind), or a view of one:
  // autograd cannot rebase such a view's history onto its siblings', so in-place writes to
  // it are refused while it requires grad (PyTorch's rule).
  bool multi_output = false;
};

struct AutogradMeta {
  bool requires_grad = false;  // set on leaves by the user; derived for results
  std::shared_ptr<class TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: where .grad is accumulated
  bool retains_grad = false;
  std::vector<std::function<Tensor(const Tensor&)>> leaf_hooks;  // hooks on a leaf's grad
  // Called with the leaf after its .grad was accumulated in a backward pass (DDP's reducer
  // starts a bucket's all-reduce from here).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, IntArray sizes, IntArray strides, int64_t offset, ScalarType dtype);
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  const Storage& storage() const { return storage_; }
  const IntArray& sizes() const { return sizes_; }
  const IntArray& strides() const { return strides_; }
  int64_t storage_offset() const { return offset_; }
  int64_t numel() const { return numel_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  ScalarType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  bool is_contiguous() const { return contiguous_; }
  void* data() const { return static_cast<char*>(storage_->data()) + offset_ * itemsize(dtype_); }

  AutogradMeta* autograd() const { return autograd_.get(); }
  AutogradMeta& autograd_mut() {
    if (!autograd_) autograd_ = std::make_unique<AutogradMeta>();
    return *autograd_;
  }
  const std::shared_ptr<ViewInfo>& view_info() const { return view_; }
  void set_view_info(std::shared_ptr<ViewInfo> v) { view_ = std::move(v); }

  // A Python-style number wrapped into a 0-dim tensor: lowest priority in type promotion.
  bool is_wrapped_number() const { return wrapped_number_; }
  void set_wrapped_number(bool v) { wrapped_number_ = v; }

 private:
  void RefreshDerived();

  Storage storage_;
  IntArray sizes_, strides_;
  int64_t offset_;
  int64_t numel_ = 1;
  ScalarType dtype_;
  bool contiguous_ = true;
  bool wrapped_number_ = false;
  std::unique_ptr<AutogradMeta> autograd_;
  std::shared_ptr<ViewInfo> view_;
};

// Row-major strides for `sizes`.
IntArray contiguous_strides(const IntArray& sizes);
int64_t numel_of(const IntArray& sizes);

}  // namespace anvil
