// Tensor: a reference-counted handle to a TensorImpl, with PyTorch's (libtorch's) API.
// Copying a Tensor copies the handle, not the data (like Python references); `clone()`
// copies data. Views (`view`, `transpose`, `narrow`, ...) share the storage.
//
// Thread-safety: as TensorImpl.
#pragma once

#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/scalar.h"
#include "core/tensor/tensor_impl.h"

namespace anvil {

namespace autograd {
class Node;
}

// Index arguments for Tensor::index, mirroring libtorch's torch::indexing.
// `None` is both "a new axis" in an index list and "no bound" inside a Slice.
struct NoneIndex {
  operator std::optional<int64_t>() const { return std::nullopt; }  // NOLINT: Slice(0, None)
};
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice() = default;
  Slice(std::optional<int64_t> start_, std::optional<int64_t> stop_, int64_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
};
struct EllipsisIndex {};
constexpr EllipsisIndex Ellipsis{};
constexpr NoneIndex None{};
class TensorIndex;

// Values read back to the host so far (Tensor::item and Tensor::to_vector calls, every
// thread): each is a synchronisation on a GPU.
int64_t host_value_reads();

class Tensor {
 public:
  Tensor() = default;  // undefined
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  const IntArray& sizes() const { return impl_->sizes(); }
  const IntArray& shape() const { return impl_->sizes(); }
  int64_t size(int64_t dim) const;
  const IntArray& strides() const { return impl_->strides(); }
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return impl_->dim(); }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return impl_->numel(); }
  int64_t storage_offset() const { return impl_->storage_offset(); }
  ScalarType dtype() const { return impl_->dtype(); }
  ScalarType scalar_type() const { return impl_->dtype(); }
  Device device() const { return impl_->device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const { return impl_->is_contiguous(); }
  bool is_floating_point() const { return anvil::is_floating_point(dtype()); }
  int64_t element_size() const { return itemsize(dtype()); }
  int64_t nbytes() const { return numel() * element_size(); }
  void* data_ptr() const { return impl_->data(); }
  template <typename T>
  T* data_ptr() const;  // checks T against dtype()
  const Storage& storage() const { return impl_->storage(); }
  // True when both tensors look at the same storage (views, detach, aliases).
  bool is_alias_of(const Tensor& other) const;
  bool is_view() const { return impl_->view_info() != nullptr; }
  // The tensor this one is a view of (undefined if it is not a view).
  Tensor _base() const;
  // The storage's version counter (NOTE [ Version counter ]).
  uint64_t _version() const { return impl_->storage()->version(); }

  // ---- element access ----
  // item() and to_vector() read values back to the host: on a GPU each is a device-to-host
  // synchronisation. host_value_reads() counts them (process-wide), so a test can assert
  // that a training loop makes none between its metric reads.
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- views (share storage) ----
  Tensor view(IntArray sizes) const;
  Tensor reshape(IntArray sizes) const;
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor reshape_as(const Tensor& other) const { return reshape(other.sizes()); }
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(IntArray dims) const;
  Tensor t() const;
  Tensor mT() const { return transpose(-2, -1); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(IntArray sizes) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntArray sizes) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor as_strided(IntArray sizes, IntArray strides, std::optional<int64_t> offset = {}) const;
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;
  Tensor movedim(int64_t src, int64_t dst) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  // Copies, not views: the tensor tiled `repeats` times along each dim (repeats may have more
  // dims than the tensor: leading ones are added); tile pads short `repeats` with ones.
  Tensor repeat(IntArray repeats) const;
  Tensor tile(IntArray repeats) const;

  // ---- copies and conversions ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;
  Tensor& detach_();
  // As libtorch's: `copy` forces a new tensor even when nothing changes. `non_blocking` lets a
  // copy to a GPU from a pinned tensor read it in place after the call returns (the caller does
  // not write it until the GPU has read it, e.g. a DataLoader batch); otherwise the source may
  // be written at once. No copy to a GPU makes the host wait for the GPU (NOTE [ Pinned
  // staging ]); copies to the CPU wait, since the host reads next.
  Tensor to(ScalarType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor to(Device device, bool non_blocking = false, bool copy = false) const;
  Tensor to(Device device, ScalarType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor cpu() const { return to(kCPU); }
  // A page-locked copy of this CPU tensor, from which copies to a GPU are queued without the
  // host waiting (NOTE [ Pinned staging ] in core/backend/cuda/host_block_cache.h); this
  // tensor itself when it is pinned already. Needs a usable CUDA device. As with PyTorch's
  // non_blocking copies, do not write a pinned tensor in place while a copy from it may still
  // be queued (read a result first, or synchronize).
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor toType(ScalarType t) const { return to(t); }
  Tensor& copy_(const Tensor& src);

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  const Tensor grad() const;
  void set_grad(const Tensor& g);
  std::shared_ptr<autograd::Node> grad_fn() const;
  uint32_t output_nr() const;
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = {},
                bool create_graph = false) const;
  // Calls `hook(grad)` when this tensor's gradient is computed; a defined return replaces it.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // A leaf only: calls `hook(leaf)` after each backward pass accumulated into leaf.grad()
  // (torch.Tensor.register_post_accumulate_grad_hook).
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  void retain_grad() const;
  bool retains_grad() const;

  // ---- indexing ----
  Tensor index(std::initializer_list<TensorIndex> indices) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;
  Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& values);
  Tensor& index_put_(const std::vector<TensorIndex>& indices, Scalar value);
  Tensor operator[](int64_t i) const { return select(0, i); }
  Tensor operator[](const Tensor& idx) const;

  // ---- in-place (version-bumping) ----
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other, Scalar alpha = 1);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& sub_(Scalar other, Scalar alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& pow_(Scalar exponent);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max);
  Tensor& zero_();
  Tensor& fill_(Scalar value);
  // The rows whose Api column generates them (core/ops/op_table.def): x.exp(), the in-place
  // x.exp_() where the column says Inplace, x.logcumsumexp(dim) for FnDim.
#define ANVIL_API_FnMethod(Id, name) Tensor name() const;
#define ANVIL_API_FnMethodInplace(Id, name) ANVIL_API_FnMethod(Id, name) Tensor& name##_();
#define ANVIL_API_FnDim(Id, name) Tensor name(int64_t dim) const;
#include "core/ops/op_api_rows.def"
  Tensor& pow_(const Tensor& exponent);
  Tensor& remainder_(const Tensor& other);
  Tensor& lerp_(const Tensor& end, Scalar weight);
  Tensor& addcmul_(const Tensor& t1, const Tensor& t2, Scalar value = 1);
  Tensor& addcdiv_(const Tensor& t1, const Tensor& t2, Scalar value = 1);
  Tensor& masked_fill_(const Tensor& mask, Scalar value);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha = 1);
  Tensor& uniform_(double from = 0, double to = 1);
  Tensor& normal_(double mean = 0, double std = 1);
  Tensor& bernoulli_(double p);

  // ---- math (thin wrappers over the free functions in core/ops/functions.h) ----
  Tensor add(const Tensor& o, Scalar alpha = 1) const;
  Tensor sub(const Tensor& o, Scalar alpha = 1) const;
  Tensor mul(const Tensor& o) const;
  Tensor div(const Tensor& o) const;
  Tensor pow(Scalar e) const;
  Tensor pow(const Tensor& e) const;
  Tensor square() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor sum() const;
  Tensor sum(IntArray dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArray dims, bool keepdim = false) const;
  Tensor prod() const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = {}, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = {}, bool keepdim = false) const;
  Tensor var(IntArray dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(IntArray dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor norm(double p = 2, IntArray dims = {}, bool keepdim = false) const;
  Tensor logsumexp(IntArray dims, bool keepdim = false) const;
  Tensor all() const;
  Tensor any() const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  std::tuple<Tensor, Tensor> cummax(int64_t dim) const;
  std::tuple<Tensor, Tensor> cummin(int64_t dim) const;
  Tensor flip(IntArray dims) const;
  Tensor roll(IntArray shifts, IntArray dims = {}) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor diff(int64_t n = 1, int64_t dim = -1, const Tensor& prepend = Tensor(), const Tensor& append = Tensor()) const;
  Tensor logaddexp(const Tensor& other) const;
  Tensor nan_to_num(std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                    std::optional<double> neginf = std::nullopt) const;
  Tensor count_nonzero(IntArray dims = {}) const;
  Tensor logit(std::optional<double> eps = std::nullopt) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  std::tuple<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  Tensor median() const;
  std::tuple<Tensor, Tensor> median(int64_t dim, bool keepdim = false) const;
  Tensor isinf() const;
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor masked_select(const Tensor& mask) const;
  Tensor nonzero() const;
  bool equal(const Tensor& other) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// One entry of a Tensor::index list.
class TensorIndex {
 public:
  TensorIndex(int64_t i) : v_(i) {}                    // NOLINT
  TensorIndex(int i) : v_(int64_t{i}) {}               // NOLINT
  TensorIndex(Slice s) : v_(s) {}                      // NOLINT
  TensorIndex(EllipsisIndex) : v_(EllipsisIndex{}) {}  // NOLINT
  TensorIndex(NoneIndex) : v_(NoneIndex{}) {}          // NOLINT
  TensorIndex(Tensor t) : v_(std::move(t)) {}          // NOLINT
  const std::variant<int64_t, Slice, EllipsisIndex, NoneIndex, Tensor>& value() const { return v_; }

 private:
  std::variant<int64_t, Slice, EllipsisIndex, NoneIndex, Tensor> v_;
};

// PyTorch-style printing: tensor([[1., 2.], ...], dtype=float64, grad_fn=<AddBackward>)
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

// Tensor <op> Tensor / Scalar operators (element-wise, broadcasting).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);  // element-wise, like libtorch
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator&(const Tensor& a, const Tensor& b);  // logical and (bool tensors)
Tensor operator|(const Tensor& a, const Tensor& b);  // logical or
Tensor operator~(const Tensor& a);                   // logical not
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, Scalar b);

// Shape helpers shared by ops.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
std::string shape_str(const IntArray& sizes);
inline std::string shape_str(const Tensor& t) { return shape_str(t.sizes()); }

template <typename T>
T* Tensor::data_ptr() const {
  ANVIL_CHECK_TYPE(CppTypeToScalarType<T>::value == dtype(), "data_ptr<", CppTypeToScalarType<T>::value,
                   ">: tensor has dtype ", dtype());
  return static_cast<T*>(impl_->data());
}

}  // namespace anvil
