// Tensor methods that are not ops of their own: metadata, conversion, autograd handles,
// libtorch-style indexing, and the thin method forms of the free functions.
#include "core/tensor/tensor.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/inplace.h"
#include "core/autograd/node.h"
#include "core/backend/registry.h"
#include "core/export/capture.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/tensor/host_reads.h"
#include "core/util/error.h"

namespace anvil {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  ANVIL_CHECK_INDEX(dim >= -n && dim < n, op, ": dimension out of range (expected to be in range of [", -n, ", ", n - 1,
                    "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

std::string shape_str(const IntArray& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_alias_of(const Tensor& other) const {
  return defined() && other.defined() && storage() == other.storage();
}

Tensor Tensor::_base() const {
  const auto& vi = impl_->view_info();
  return vi ? Tensor(vi->base) : Tensor();
}

namespace {
std::atomic<int64_t> g_host_value_reads{0};
thread_local int64_t t_host_value_reads = 0;  // host_reads.h

void CountHostRead() {
  g_host_value_reads.fetch_add(1, std::memory_order_relaxed);
  ++t_host_value_reads;
}
}  // namespace

int64_t host_value_reads() { return g_host_value_reads.load(std::memory_order_relaxed); }
int64_t host_value_reads_on_this_thread() { return t_host_value_reads; }

template <typename T>
T Tensor::item() const {
  ANVIL_CHECK(numel() == 1, "a Tensor with ", numel(), " elements cannot be converted to a scalar");
  CountHostRead();
  if (exporter::detail::active()) exporter::detail::on_value_read(*this, "item()");
  Tensor c = to(kCPU).contiguous();
  return ANVIL_DISPATCH_ALL(dtype(), "item", [&]() -> T {
    const scalar_t v = *static_cast<const scalar_t*>(c.data_ptr());
    if constexpr (std::is_same_v<T, bool>)
      return static_cast<double>(opmath_t<scalar_t>(v)) != 0;
    else
      return static_cast<T>(static_cast<opmath_t<scalar_t>>(v));
  });
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template int16_t Tensor::item<int16_t>() const;
template int8_t Tensor::item<int8_t>() const;
template uint8_t Tensor::item<uint8_t>() const;
template bool Tensor::item<bool>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  CountHostRead();
  if (exporter::detail::active()) exporter::detail::on_value_read(*this, "to_vector()");
  Tensor c = to(kCPU).to(CppTypeToScalarType<T>::value).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());  // std::vector<bool> too: element-wise copy
}
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<int16_t> Tensor::to_vector<int16_t>() const;
template std::vector<int8_t> Tensor::to_vector<int8_t>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

// ---- copies ----

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const { return dispatch1(OpId::Clone, {*this}, OpAttrs{}); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(storage(), sizes(), strides(), storage_offset(), dtype());
  return Tensor(impl);
}

Tensor& Tensor::detach_() {
  ANVIL_CHECK(!is_view(), "detach_: cannot detach a view in place; use detach()");
  if (auto* m = impl_->autograd()) {
    m->grad_fn.reset();
    m->requires_grad = false;
  }
  return *this;
}

Tensor Tensor::to(ScalarType t, bool /*non_blocking*/, bool copy) const {
  if (t == dtype() && !copy) return *this;
  return dispatch1(OpId::Cast, {*this}, CastArgs{t});
}

Tensor Tensor::to(Device d, bool non_blocking, bool copy) const {
  if (d == device()) return copy ? clone() : *this;
  ANVIL_CHECK(!requires_grad() || !GradMode::is_enabled(),
              "to(device) of a tensor that requires grad is not differentiable yet; detach() first");
  // Cross-device: contiguous bytes through the owning backend (CUDA backends add streams).
  Tensor src = contiguous();
  Tensor out = empty(sizes(), TensorOptions(dtype()).with_device(d));
  Backend& be = backend_for(d.is_cpu() ? device() : d);
  be.copy_bytes(out.data_ptr(), d, src.data_ptr(), device(), static_cast<size_t>(nbytes()), non_blocking);
  return out;
}

Tensor Tensor::to(Device d, ScalarType t, bool non_blocking, bool copy) const {
  const Tensor converted = to(t, false, copy && d == device());
  return converted.to(d, non_blocking);
}

bool Tensor::is_pinned() const {
  const Allocator* a = impl_->storage()->allocator();
  return a != nullptr && a->is_pinned();
}

Tensor Tensor::pin_memory() const {
  ANVIL_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned; this one is on ", device());
  if (is_pinned()) return *this;
  Allocator* pinned = pinned_memory_allocator();
  if (pinned == nullptr) {
    throw NotImplementedError(
        detail::StrCat("pin_memory: page-locked memory is for copies to a GPU, and there is "
                       "none: ",
                       cuda_unavailable_reason()));
  }
  const Tensor src = contiguous();
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(nbytes()), pinned);
  Tensor out(std::make_shared<TensorImpl>(std::move(storage), sizes(), src.strides(), 0, dtype()));
  if (nbytes() > 0) std::memcpy(out.data_ptr(), src.data_ptr(), static_cast<size_t>(nbytes()));
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) { return copy_into(*this, src, "copy_"); }

// ---- autograd ----

bool Tensor::requires_grad() const {
  const AutogradMeta* m = impl_->autograd();
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

Tensor& Tensor::requires_grad_(bool r) {
  AutogradMeta& m = impl_->autograd_mut();
  if (!r) {
    ANVIL_CHECK(m.grad_fn == nullptr,
                "you can only change requires_grad flags of leaf variables. If you want "
                "to use a computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach().");
    m.requires_grad = false;
    return *this;
  }
  ANVIL_CHECK(m.grad_fn == nullptr,
              "requires_grad_: only leaf tensors can be marked; this one is the "
              "result of an op (it already requires grad)");
  ANVIL_CHECK_TYPE(is_floating_point(), "only Tensors of floating point dtype can require gradients, got ", dtype());
  m.requires_grad = true;
  return *this;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

const Tensor Tensor::grad() const {
  const AutogradMeta* m = impl_->autograd();
  return (m && m->grad) ? Tensor(m->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    ANVIL_CHECK(g.sizes() == sizes(), "set_grad: assigned grad has shape ", shape_str(g.sizes()),
                " but the tensor has shape ", shape_str(sizes()));
  }
  impl_->autograd_mut().grad = g.defined() ? g.impl_ptr() : nullptr;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  AutogradMeta* m = impl_->autograd();
  if (m == nullptr) return nullptr;
  const auto& vi = impl_->view_info();
  if (vi && m->grad_fn && vi->grad_fn_version != _version()) {
    // NOTE [ View tracking ]: the base may have been rebased by an in-place write.
    if (auto fn = autograd::regenerate_view_grad_fn(*this)) {
      m->grad_fn = fn;
      m->output_nr = 0;
    }
  }
  return m->grad_fn;
}

uint32_t Tensor::output_nr() const {
  const AutogradMeta* m = impl_->autograd();
  return m ? m->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  ANVIL_CHECK(requires_grad(), "cannot register a hook on a tensor that doesn't require gradient");
  if (auto fn = grad_fn()) {
    fn->add_pre_hook(output_nr(), std::move(hook));
  } else {
    impl_->autograd_mut().leaf_hooks.push_back(std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  ANVIL_CHECK(requires_grad(), "cannot register a hook on a tensor that doesn't require gradient");
  ANVIL_CHECK(is_leaf(), "post accumulate grad hooks cannot be registered on non-leaf tensors");
  impl_->autograd_mut().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  ANVIL_CHECK(requires_grad(), "can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf() || retains_grad()) return;
  impl_->autograd_mut().retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  grad_fn()->add_pre_hook(output_nr(), [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      auto& m = impl->autograd_mut();
      if (!m.grad)
        m.grad = g.detach().clone().impl_ptr();
      else
        m.grad = (Tensor(m.grad) + g.detach()).impl_ptr();
    }
    return Tensor();
  });
}

bool Tensor::retains_grad() const {
  const AutogradMeta* m = impl_->autograd();
  return m && m->retains_grad;
}

// ---- libtorch-style indexing ----

namespace {
// Applies ints/slices/None/Ellipsis as views; returns the view and the advanced indices
// (undefined entries = full slices) positioned against the view's dims.
std::pair<Tensor, std::vector<Tensor>> ApplyBasic(const Tensor& self, const std::vector<TensorIndex>& idx) {
  int64_t consumed = 0;
  for (const auto& i : idx) {
    const auto& v = i.value();
    if (std::holds_alternative<int64_t>(v) || std::holds_alternative<Slice>(v)) ++consumed;
    if (const Tensor* t = std::get_if<Tensor>(&v)) consumed += (t->dtype() == kBool ? t->dim() : 1);
  }
  Tensor r = self;
  int64_t dim = 0;
  std::vector<std::pair<int64_t, Tensor>> adv;
  bool seen_ellipsis = false;
  for (const auto& i : idx) {
    const auto& v = i.value();
    if (const int64_t* n = std::get_if<int64_t>(&v)) {
      ANVIL_CHECK_INDEX(dim < r.dim(), "too many indices for tensor of dimension ", self.dim());
      r = r.select(dim, *n);
    } else if (const Slice* s = std::get_if<Slice>(&v)) {
      ANVIL_CHECK_INDEX(dim < r.dim(), "too many indices for tensor of dimension ", self.dim());
      r = r.slice(dim, s->start, s->stop, s->step);
      ++dim;
    } else if (std::holds_alternative<NoneIndex>(v)) {
      r = r.unsqueeze(dim);
      ++dim;
    } else if (std::holds_alternative<EllipsisIndex>(v)) {
      ANVIL_CHECK_INDEX(!seen_ellipsis, "an index can only have a single ellipsis ('...')");
      seen_ellipsis = true;
      dim += self.dim() - consumed;
    } else {
      const Tensor& t = std::get<Tensor>(v);
      adv.emplace_back(dim, t);
      dim += t.dtype() == kBool ? t.dim() : 1;
    }
  }
  ANVIL_CHECK_INDEX(dim <= r.dim(), "too many indices for tensor of dimension ", self.dim());
  std::vector<Tensor> list;
  int64_t covered = 0;  // dims of r that `list` accounts for (a bool mask covers several)
  for (auto& [d, t] : adv) {
    for (; covered < d; ++covered) list.emplace_back();
    list.push_back(t);
    covered += t.dtype() == kBool ? t.dim() : 1;
  }
  return {r, list};
}
}  // namespace

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index(std::vector<TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  auto [view, adv] = ApplyBasic(*this, indices);
  return adv.empty() ? view : anvil::index(view, adv);
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values) {
  auto [view, adv] = ApplyBasic(*this, indices);
  if (adv.empty()) {
    view.copy_(values);
  } else if (view.impl() == impl()) {
    anvil::index_put_(*this, adv, values);
  } else {
    anvil::index_put_(view, adv, values);
  }
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) {
  return index_put_(indices, wrap_scalar(value, device()));
}

Tensor Tensor::operator[](const Tensor& idx) const { return anvil::index(*this, {idx}); }

// ---- method forms ----
Tensor Tensor::add(const Tensor& o, Scalar a) const { return anvil::add(*this, o, a); }
Tensor Tensor::sub(const Tensor& o, Scalar a) const { return anvil::sub(*this, o, a); }
Tensor Tensor::mul(const Tensor& o) const { return anvil::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return anvil::div(*this, o); }
Tensor Tensor::pow(Scalar e) const { return anvil::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return anvil::pow(*this, e); }
Tensor Tensor::square() const { return anvil::square(*this); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return anvil::clamp(*this, lo, hi); }
Tensor Tensor::sum() const { return anvil::sum(*this); }
Tensor Tensor::sum(IntArray d, bool k) const { return anvil::sum(*this, std::move(d), k); }
Tensor Tensor::mean() const { return anvil::mean(*this); }
Tensor Tensor::mean(IntArray d, bool k) const { return anvil::mean(*this, std::move(d), k); }
Tensor Tensor::prod() const { return anvil::prod(*this); }
Tensor Tensor::max() const { return anvil::max(*this); }
Tensor Tensor::min() const { return anvil::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return anvil::max(*this, d, k); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return anvil::min(*this, d, k); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const { return anvil::argmax(*this, d, k); }
Tensor Tensor::argmin(std::optional<int64_t> d, bool k) const { return anvil::argmin(*this, d, k); }
Tensor Tensor::var(IntArray d, int64_t c, bool k) const { return anvil::var(*this, std::move(d), c, k); }
Tensor Tensor::std(IntArray d, int64_t c, bool k) const { return anvil::std(*this, std::move(d), c, k); }
Tensor Tensor::norm(double p, IntArray d, bool k) const { return anvil::norm(*this, p, std::move(d), k); }
Tensor Tensor::logsumexp(IntArray d, bool k) const { return anvil::logsumexp(*this, std::move(d), k); }
Tensor Tensor::all() const { return anvil::all(*this); }
Tensor Tensor::any() const { return anvil::any(*this); }
Tensor Tensor::cumsum(int64_t d) const { return anvil::cumsum(*this, d); }
Tensor Tensor::cumprod(int64_t d) const { return anvil::cumprod(*this, d); }
std::tuple<Tensor, Tensor> Tensor::cummax(int64_t d) const { return anvil::cummax(*this, d); }
std::tuple<Tensor, Tensor> Tensor::cummin(int64_t d) const { return anvil::cummin(*this, d); }
Tensor Tensor::flip(IntArray dims) const { return anvil::flip(*this, std::move(dims)); }
Tensor Tensor::roll(IntArray shifts, IntArray dims) const {
  return anvil::roll(*this, std::move(shifts), std::move(dims));
}
Tensor Tensor::tril(int64_t diagonal) const { return anvil::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return anvil::triu(*this, diagonal); }
Tensor Tensor::diff(int64_t n, int64_t d, const Tensor& prepend, const Tensor& append) const {
  return anvil::diff(*this, n, d, prepend, append);
}
Tensor Tensor::logaddexp(const Tensor& other) const { return anvil::logaddexp(*this, other); }
Tensor Tensor::nan_to_num(std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf) const {
  return anvil::nan_to_num(*this, nan, posinf, neginf);
}
Tensor Tensor::count_nonzero(IntArray dims) const { return anvil::count_nonzero(*this, std::move(dims)); }
Tensor Tensor::logit(std::optional<double> eps) const { return anvil::logit(*this, eps); }
std::tuple<Tensor, Tensor> Tensor::sort(int64_t d, bool descending) const { return anvil::sort(*this, d, descending); }
Tensor Tensor::argsort(int64_t d, bool descending) const { return anvil::argsort(*this, d, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t d, bool largest, bool sorted) const {
  return anvil::topk(*this, k, d, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t d, bool keepdim) const {
  return anvil::kthvalue(*this, k, d, keepdim);
}
Tensor Tensor::median() const { return anvil::median(*this); }
std::tuple<Tensor, Tensor> Tensor::median(int64_t d, bool keepdim) const { return anvil::median(*this, d, keepdim); }
Tensor Tensor::isinf() const { return anvil::isinf(*this); }
Tensor Tensor::matmul(const Tensor& o) const { return anvil::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return anvil::mm(*this, o); }
Tensor Tensor::softmax(int64_t d) const { return anvil::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return anvil::log_softmax(*this, d); }
Tensor Tensor::eq(const Tensor& o) const { return anvil::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return anvil::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return anvil::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return anvil::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return anvil::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return anvil::ge(*this, o); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return anvil::gather(*this, d, i); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return anvil::index_select(*this, d, i); }
Tensor Tensor::masked_fill(const Tensor& m, Scalar v) const { return anvil::masked_fill(*this, m, v); }
Tensor Tensor::masked_select(const Tensor& m) const { return anvil::masked_select(*this, m); }
Tensor Tensor::nonzero() const { return anvil::nonzero(*this); }
bool Tensor::equal(const Tensor& o) const { return anvil::equal(*this, o); }
bool Tensor::allclose(const Tensor& o, double r, double a) const { return anvil::allclose(*this, o, r, a); }

bool equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  NoGradGuard no_grad;
  return all(eq(a, b)).item<bool>();
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  NoGradGuard no_grad;
  Tensor x = a.to(kFloat64), y = b.to(kFloat64);
  // torch.allclose with equal_nan=false: a NaN anywhere is never close; equal infinities are.
  Tensor close = le(abs(x - y), abs(y) * rtol + atol) | eq(x, y);
  return all(close).item<bool>();
}

}  // namespace anvil
