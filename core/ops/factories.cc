// Tensor factories and random draws.
#include <cmath>
#include <cstring>

#include "core/autograd/grad_mode.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/tensor/random.h"
#include "core/util/error.h"

namespace anvil {
namespace {

Tensor Finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

void FillWith(Tensor& t, OpId op, const OpAttrs& a) {
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  dispatch_into(op, {}, t, a);
}

// Reserves Philox blocks for `n` elements (4 per block for float draws, 2 for the rest).
PhiloxArgs RandomAttrs(int64_t n, int per_block) {
  auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>((n + per_block - 1) / per_block));
  return PhiloxArgs{seed, offset};
}

}  // namespace

Tensor empty(IntArray sizes, TensorOptions o) {
  const int64_t n = numel_of(sizes);
  IntArray strides = contiguous_strides(sizes);
  Storage s = make_storage(static_cast<size_t>(n * itemsize(o.dtype)), o.device);
  return Finish(Tensor(std::make_shared<TensorImpl>(std::move(s), std::move(sizes), std::move(strides), 0, o.dtype)),
                o);
}

Tensor empty_strided(IntArray sizes, IntArray strides, TensorOptions o) {
  ANVIL_CHECK(sizes.size() == strides.size(), "empty_strided: ", sizes.size(), " sizes but ", strides.size(),
              " strides");
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) {
      extent = 0;
      break;
    }
    extent += (sizes[i] - 1) * strides[i];
  }
  Storage s = make_storage(static_cast<size_t>(extent * itemsize(o.dtype)), o.device);
  return Finish(Tensor(std::make_shared<TensorImpl>(std::move(s), std::move(sizes), std::move(strides), 0, o.dtype)),
                o);
}

Tensor full(IntArray sizes, Scalar value, TensorOptions o) {
  // Without a dtype the value's kind decides, as torch.full's: int64, bool or the default.
  if (!o.dtype_given && !value.is_floating_point()) o.with_dtype(value.is_bool() ? kBool : kInt64);
  Tensor t = empty(std::move(sizes), TensorOptions(o.dtype).with_device(o.device));
  FillWith(t, OpId::Fill, FillArgs{value.to_double()});
  return Finish(t, o);
}
Tensor zeros(IntArray sizes, TensorOptions o) { return full(std::move(sizes), 0.0, o); }
Tensor ones(IntArray sizes, TensorOptions o) { return full(std::move(sizes), 1.0, o); }
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), TensorOptions(t.dtype()).with_device(t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), TensorOptions(t.dtype()).with_device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), TensorOptions(t.dtype()).with_device(t.device())); }
Tensor full_like(const Tensor& t, Scalar v) {
  return full(t.sizes(), v, TensorOptions(t.dtype()).with_device(t.device()));
}
Tensor scalar_tensor(Scalar v, TensorOptions o) {
  if (!o.dtype_given) o.with_dtype(default_dtype());  // torch.scalar_tensor(3) is float32
  return full({}, v, o);
}

Tensor arange(Scalar end, TensorOptions o) { return arange(0, end, 1, o); }

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions o) {
  const double s = start.to_double(), e = end.to_double(), st = step.to_double();
  ANVIL_CHECK(st != 0, "arange: step must be nonzero");
  ANVIL_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
              "arange: upper bound and larger bound inconsistent with step sign");
  const int64_t n = static_cast<int64_t>(std::ceil((e - s) / st));
  if (!o.dtype_given) {  // torch.arange: integer bounds and step give int64
    const bool integral = !start.is_floating_point() && !end.is_floating_point() && !step.is_floating_point();
    o.dtype = integral ? kInt64 : default_dtype();
  }
  Tensor t = empty({n}, TensorOptions(o.dtype).with_device(o.device));
  FillWith(t, OpId::Arange, ArangeArgs{.start = s, .step = st});
  return Finish(t, o);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  ANVIL_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor t = empty({steps}, TensorOptions(o.dtype).with_device(o.device));
  ArangeArgs a;
  a.start = start;
  a.step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  a.symmetric = true;                // the second half counts back from `end`, exactly
  a.end = steps == 1 ? start : end;  // one step is the start, as PyTorch's
  FillWith(t, OpId::Arange, a);
  return Finish(t, o);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  Tensor t = zeros({n, m.value_or(n)}, TensorOptions(o.dtype).with_device(o.device));
  {
    NoGradGuard no_grad;
    Tensor d = t.diagonal();
    d.fill_(1);
  }
  return Finish(t, o);
}

template <typename T>
Tensor tensor(const std::vector<T>& data, std::optional<IntArray> sizes, TensorOptions o) {
  IntArray shape = sizes.value_or(IntArray{static_cast<int64_t>(data.size())});
  ANVIL_CHECK(numel_of(shape) == static_cast<int64_t>(data.size()), "tensor: shape ", shape_str(shape), " needs ",
              numel_of(shape), " values, got ", data.size());
  Tensor t = empty(shape, TensorOptions(CppTypeToScalarType<T>::value));
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = t.data_ptr<bool>();
    for (size_t i = 0; i < data.size(); ++i) p[i] = data[i];
  } else if (!data.empty()) {
    std::memcpy(t.data_ptr(), data.data(), data.size() * sizeof(T));
  }
  Tensor r = (o.dtype == t.dtype() && o.device == kCPU) ? t : t.to(o.device, o.dtype);
  return Finish(r, o);
}
template Tensor tensor(const std::vector<float>&, std::optional<IntArray>, TensorOptions);
template Tensor tensor(const std::vector<double>&, std::optional<IntArray>, TensorOptions);
template Tensor tensor(const std::vector<int64_t>&, std::optional<IntArray>, TensorOptions);
template Tensor tensor(const std::vector<int32_t>&, std::optional<IntArray>, TensorOptions);
template Tensor tensor(const std::vector<uint8_t>&, std::optional<IntArray>, TensorOptions);
template Tensor tensor(const std::vector<int8_t>&, std::optional<IntArray>, TensorOptions);
template Tensor tensor(const std::vector<bool>&, std::optional<IntArray>, TensorOptions);

Tensor tensor(std::initializer_list<double> data, TensorOptions o) {
  return tensor(std::vector<double>(data), std::nullopt, o);
}
// The sizes are given explicitly: GCC 12 at -O3 warns that an empty std::optional<IntArray>
// temporary "may be used uninitialized" here (a false positive that -Werror would make fatal).
Tensor tensor(std::initializer_list<int> data, TensorOptions o) {
  if (!o.dtype_given) o.with_dtype(kInt64);
  const std::vector<int64_t> values(data.begin(), data.end());
  return tensor(values, IntArray{static_cast<int64_t>(values.size())}, o);
}
Tensor tensor(std::initializer_list<bool> data, TensorOptions o) {
  if (!o.dtype_given) o.with_dtype(kBool);
  const std::vector<uint8_t> bytes(data.begin(), data.end());
  return tensor(bytes, IntArray{static_cast<int64_t>(bytes.size())}, TensorOptions(kUInt8).with_device(o.device))
      .to(o.dtype);
}

Tensor from_blob(void* data, IntArray sizes, ScalarType dtype, std::function<void(void*)> deleter, Device device) {
  const int64_t n = numel_of(sizes);
  auto storage =
      std::make_shared<StorageImpl>(data, static_cast<size_t>(n * itemsize(dtype)), device, std::move(deleter));
  IntArray strides = contiguous_strides(sizes);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), std::move(sizes), std::move(strides), 0, dtype));
}

// ---- random ----

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Tensor& Tensor::uniform_(double from, double to) {
  ANVIL_CHECK(from <= to, "uniform_: expects from <= to, got from=", from, " to=", to);
  check_inplace_allowed(*this, "uniform_");
  FillWith(*this, OpId::Uniform, UniformArgs{from, to, RandomAttrs(numel(), dtype() == kFloat64 ? 2 : 4)});
  storage()->bump_version("uniform_");
  return *this;
}

Tensor& Tensor::normal_(double mean, double std) {
  ANVIL_CHECK(std >= 0, "normal_: expects std >= 0.0, got std=", std);
  check_inplace_allowed(*this, "normal_");
  FillWith(*this, OpId::Normal, NormalArgs{mean, std, RandomAttrs(numel(), 2)});
  storage()->bump_version("normal_");
  return *this;
}

Tensor& Tensor::bernoulli_(double p) {
  ANVIL_CHECK(p >= 0 && p <= 1, "bernoulli_: expects 0 <= p <= 1, got p=", p);
  check_inplace_allowed(*this, "bernoulli_");
  FillWith(*this, OpId::Bernoulli, BernoulliArgs{p, RandomAttrs(numel(), 2)});
  storage()->bump_version("bernoulli_");
  return *this;
}

Tensor rand(IntArray sizes, TensorOptions o) {
  Tensor t = empty(std::move(sizes), TensorOptions(o.dtype).with_device(o.device));
  t.uniform_(0, 1);
  return Finish(t, o);
}
Tensor randn(IntArray sizes, TensorOptions o) {
  Tensor t = empty(std::move(sizes), TensorOptions(o.dtype).with_device(o.device));
  t.normal_(0, 1);
  return Finish(t, o);
}
Tensor rand_like(const Tensor& t) { return rand(t.sizes(), TensorOptions(t.dtype()).with_device(t.device())); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), TensorOptions(t.dtype()).with_device(t.device())); }

Tensor randint(int64_t low, int64_t high, IntArray sizes, TensorOptions o) {
  ANVIL_CHECK(low < high, "randint: expected low < high, got low=", low, " high=", high);
  Tensor u = empty(std::move(sizes), TensorOptions(kFloat64).with_device(o.device));
  u.uniform_(0, 1);
  return Finish(floor(u * static_cast<double>(high - low) + static_cast<double>(low)).to(o.dtype), o);
}

Tensor randperm(int64_t n, TensorOptions o) {
  ANVIL_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  // Fisher-Yates with one Philox draw per swap, on the CPU.
  auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>((n + 1) / 2));
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    auto r = philox4x32(seed, offset + static_cast<uint64_t>(i) / 2);
    const int lane = static_cast<int>(i % 2) * 2;
    const int64_t j = static_cast<int64_t>(uniform_double(r[lane], r[lane + 1]) * static_cast<double>(i + 1));
    std::swap(perm[i], perm[std::min(j, i)]);
  }
  return tensor(perm, std::nullopt, TensorOptions(o.dtype).with_device(o.device));
}

Tensor bernoulli(const Tensor& p) {
  Tensor out = empty(p.sizes(), TensorOptions(p.dtype()).with_device(p.device()));
  const BernoulliArgs a{.philox = RandomAttrs(out.numel(), 2)};
  if (out.numel() == 0) return out;
  NoGradGuard no_grad;
  std::vector<Tensor> outs{out};
  dispatch_into(OpId::Bernoulli, {p}, out, a);
  return out;
}

}  // namespace anvil
