// Element-wise ops: type promotion (PyTorch's result_type), scalar wrapping, and the
// in-place forms. Kernels see operands of one dtype; casts are ordinary (differentiable)
// ops recorded before the kernel runs.
#include "core/autograd/derivatives.h"
#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

int Category(ScalarType t) { return t == kBool ? 0 : (is_integral(t, false) ? 1 : 2); }

OpAttrs Attrs() { return OpAttrs{}; }

}  // namespace

Tensor unary_op(OpId op, const Tensor& x, const OpAttrs& a) {
  ANVIL_CHECK(x.defined(), op_name(op), ": got an undefined tensor");
  if (op_info(op).infer == InferFamily::UnaryFloat && !x.is_floating_point()) {
    return dispatch1(op, {x.to(default_dtype())}, a);
  }
  if (op == OpId::Sign && x.dtype() == kBool) return x.clone();  // sign of a bool is itself
  ANVIL_CHECK_TYPE(!(x.dtype() == kBool && op_info(op).infer == InferFamily::UnaryKeep), op_name(op),
                   ": not supported for bool tensors");
  return dispatch1(op, {x}, a);
}

namespace {

Tensor Unary(OpId op, const Tensor& x, const OpAttrs& a = Attrs()) { return unary_op(op, x, a); }

// A Python number meeting a float16 or bfloat16 tensor in a product or quotient: PyTorch
// computes in float32 with the number at float32 precision (its mul and div kernels read the
// wrapped number's original value as their op-math type), never rounding it to the tensor's
// dtype first: x * 0.1 is float16(float(x) * 0.1f). Its add and sub round the number to the
// tensor's dtype (x + 0.1 adds float16(0.1)), which the ordinary path does too.
bool HalfWithNumber(OpId op, ScalarType rt, const Tensor& a, const Tensor& b) {
  if (rt != kFloat16 && rt != kBFloat16) return false;
  if (op != OpId::Mul && op != OpId::Div) return false;
  return a.impl()->is_wrapped_number() != b.impl()->is_wrapped_number();
}

Tensor Binary(OpId op, const Tensor& a, const Tensor& b, const OpAttrs& at = Attrs()) {
  ANVIL_CHECK(a.defined() && b.defined(), op_name(op), ": got an undefined tensor");
  ScalarType rt = result_type(a, b);
  if (HalfWithNumber(op, rt, a, b)) {
    return dispatch1(op, {a.to(kFloat32), b.to(kFloat32)}, at).to(rt);
  }
  if (op_info(op).infer == InferFamily::BinaryFloat && !is_floating_point(rt)) rt = default_dtype();
  ANVIL_CHECK_TYPE(!(rt == kBool && op == OpId::Sub),
                   "Subtraction, the `-` operator, with two "
                   "bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
  ANVIL_CHECK_TYPE(!(op == OpId::Sub && (a.dtype() == kBool || b.dtype() == kBool)),
                   "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert "
                   "a mask, use the `~` or `logical_not()` operator instead.");
  return dispatch1(op, {a.dtype() == rt ? a : a.to(rt), b.dtype() == rt ? b : b.to(rt)}, at);
}

Tensor& BinaryInplace(OpId op, Tensor& self, const Tensor& other, const OpAttrs& at, const char* name) {
  ScalarType rt = result_type(self, other);
  if (op_info(op).infer == InferFamily::BinaryFloat && !is_floating_point(rt)) rt = default_dtype();
  ANVIL_CHECK_TYPE(Category(rt) <= Category(self.dtype()), name, ": result type ", rt,
                   " can't be cast to the desired output type ", self.dtype());
  if (HalfWithNumber(op, self.dtype(), self, other) && !(GradMode::is_enabled() && self.requires_grad())) {
    // As the out-of-place form (HalfWithNumber), written back: x.mul_(0.1) in an optimizer.
    const Tensor r = dispatch1(op, {self.to(kFloat32), other.to(kFloat32)}, at);
    self.copy_(r);
    return self;
  }
  Tensor o = other.dtype() == self.dtype() ? other : other.to(self.dtype());
  return inplace_op(op, self, {o}, at, name);
}

ClampArgs ClampBounds(const std::optional<Scalar>& lo, const std::optional<Scalar>& hi, const char* name) {
  ANVIL_CHECK(lo || hi, name, ": at least one of 'min' or 'max' must not be None");
  ClampArgs a;
  if (lo) a.min = lo->to_double();
  if (hi) a.max = hi->to_double();
  return a;
}

ScaleArgs Alpha(Scalar alpha) { return {alpha.to_double()}; }

}  // namespace

Tensor binary_op(OpId op, const Tensor& a, const Tensor& b, const OpAttrs& attrs) { return Binary(op, a, b, attrs); }

Tensor wrap_scalar(Scalar s, Device device) {
  // Floating scalars are held in float64, as PyTorch wraps Python floats: the value enters
  // float64 math unrounded. result_type still ranks a wrapped float as the default dtype, so
  // x_float32 * 0.1 stays float32.
  const ScalarType dt = s.is_floating_point() ? kFloat64 : s.dtype();
  Tensor t = full({}, s, TensorOptions(dt).with_device(device));
  t.impl()->set_wrapped_number(true);
  return t;
}

ScalarType result_type(const Tensor& a, const Tensor& b) {
  // Three priority classes: tensors with dims > zero-dim tensors > wrapped numbers. A lower
  // class only matters when its category (bool < integer < float) is higher.
  std::optional<ScalarType> cls[3];
  for (const Tensor* t : {&a, &b}) {
    const int c = t->impl()->is_wrapped_number() ? 2 : (t->dim() == 0 ? 1 : 0);
    cls[c] = cls[c] ? promote_types(*cls[c], t->dtype()) : t->dtype();
  }
  std::optional<ScalarType> r = cls[0];
  for (int c = 1; c < 3; ++c) {
    if (!cls[c]) continue;
    ScalarType lower = *cls[c];
    if (c == 2 && is_floating_point(lower)) lower = default_dtype();
    if (!r)
      r = lower;
    else if (Category(lower) > Category(*r))
      r = is_floating_point(lower) && c == 2 ? default_dtype() : promote_types(*r, lower);
  }
  return *r;
}

Tensor square(const Tensor& x) { return pow(x, 2); }

Tensor gelu(const Tensor& x, const std::string& approximate) {
  ANVIL_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
              approximate, "'");
  return Unary(OpId::Gelu, x, GeluArgs{.tanh_approximation = approximate == "tanh"});
}
Tensor relu_backward(const Tensor& grad, const Tensor& result) { return Binary(OpId::ReluBackward, grad, result); }
Tensor leaky_relu(const Tensor& x, double slope) { return Unary(OpId::LeakyRelu, x, LeakyReluArgs{slope}); }
Tensor elu(const Tensor& x, double alpha) { return Unary(OpId::Elu, x, EluArgs{alpha}); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return Unary(OpId::Softplus, x, SoftplusArgs{beta, threshold});
}
Tensor pow(const Tensor& x, Scalar e) {
  if (!e.is_floating_point() && x.is_floating_point() == false) {
    ANVIL_CHECK(e.to_int() >= 0, "Integers to negative integer powers are not allowed.");
  }
  // A bool base promotes with the exponent: an integer power is int64, a float one float.
  Tensor base = (e.is_floating_point() && !x.is_floating_point()) ? x.to(default_dtype())
                : x.dtype() == kBool                              ? x.to(kInt64)
                                                                  : x;
  return dispatch1(OpId::PowScalar, {base}, PowScalarArgs{e.to_double()});
}
Tensor pow(const Tensor& x, const Tensor& e) { return Binary(OpId::Pow, x, e); }
Tensor pow(Scalar base, const Tensor& e) { return Binary(OpId::Pow, wrap_scalar(base, e.device()), e); }
Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  const OpAttrs a = ClampBounds(lo, hi, "clamp");
  const bool float_bound = (lo && lo->is_floating_point()) || (hi && hi->is_floating_point());
  if (float_bound && !x.is_floating_point()) return Unary(OpId::Clamp, x.to(default_dtype()), a);
  // A bool tensor with integer bounds promotes to int64, as PyTorch's result_type does.
  return Unary(OpId::Clamp, x.dtype() == kBool ? x.to(kInt64) : x, a);
}

namespace {
// PyTorch's alpha_check: alpha must fit the result's category, never be silently truncated
// (add(int, int, alpha=2.5) would add 2 b).
void CheckAlpha(ScalarType result, Scalar alpha) {
  ANVIL_CHECK_TYPE(!alpha.is_bool() || result == kBool, "Boolean alpha only supported for Boolean results.");
  ANVIL_CHECK_TYPE(is_floating_point(result) || !alpha.is_floating_point(),
                   "For integral input tensors, argument alpha must not be a floating point number.");
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  CheckAlpha(result_type(a, b), alpha);
  return Binary(OpId::Add, a, b, Alpha(alpha));
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  CheckAlpha(result_type(a, b), alpha);
  return Binary(OpId::Sub, a, b, Alpha(alpha));
}
Tensor mul(const Tensor& a, const Tensor& b) { return Binary(OpId::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return Binary(OpId::Div, a, b); }

namespace {
// The larger (`larger`: maximum, fmax) or smaller (minimum, fmin) of a and b by the row `id`.
// Over bools the larger is "or" and the smaller "and" (no NaN to propagate or ignore).
Tensor Extremum(OpId id, bool larger, const Tensor& a, const Tensor& b) {
  if (result_type(a, b) == kBool) return larger ? logical_or(a, b) : logical_and(a, b);
  return Binary(id, a, b);
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return Extremum(OpId::Maximum, true, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return Extremum(OpId::Minimum, false, a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) { return Binary(OpId::Remainder, a, b); }
Tensor atan2(const Tensor& a, const Tensor& b) { return Binary(OpId::Atan2, a, b); }

Tensor fmod(const Tensor& a, const Tensor& b) { return Binary(OpId::Fmod, a, b); }
Tensor fmax(const Tensor& a, const Tensor& b) { return Extremum(OpId::Fmax, true, a, b); }
Tensor fmin(const Tensor& a, const Tensor& b) { return Extremum(OpId::Fmin, false, a, b); }
Tensor floor_divide(const Tensor& a, const Tensor& b) { return Binary(OpId::FloorDivide, a, b); }
Tensor div(const Tensor& a, const Tensor& b, const std::string& mode) {
  if (mode.empty() || mode == "true") return div(a, b);
  if (mode == "floor") return floor_divide(a, b);
  ANVIL_CHECK(mode == "trunc", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", mode,
              "'");
  return Binary(OpId::TruncDivide, a, b);
}
namespace {
// clamp with tensor bounds, with PyTorch 2.x's gradients: x takes it strictly inside the
// bounds (and where it is NaN, or sits on both bounds at once), a bound where x is beyond it,
// and x and a bound it touches split it in half. With lo > hi the result is hi, which takes
// it all. (One bound alone is maximum or minimum.)
struct ClampTensors : autograd::Function<ClampTensors> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, Tensor lo, Tensor hi) {
    ctx->save_for_backward({x, lo, hi});
    return minimum(maximum(x, lo), hi);
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const std::vector<Tensor> s = ctx->get_saved_variables();
    const Tensor &x = s[0], &lo = s[1], &hi = s[2];
    const Tensor zero = zeros_like(g[0]);
    const Tensor half = g[0] * 0.5;
    const Tensor crossed = gt(lo, hi);
    const Tensor both = logical_and(eq(x, lo), eq(x, hi));
    const Tensor at_lo = logical_and(eq(x, lo), logical_not(both));
    const Tensor at_hi = logical_and(eq(x, hi), logical_not(both));
    const Tensor below = lt(x, lo), above = gt(x, hi);
    Tensor gx, glo, ghi;
    if (ctx->needs_input_grad(0)) {
      const Tensor w = where(logical_or(below, above), zero, where(logical_or(at_lo, at_hi), half, g[0]));
      gx = autograd::sum_to(where(crossed, zero, w), x.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      glo = autograd::sum_to(where(crossed, zero, where(below, g[0], where(at_lo, half, zero))), lo.sizes());
    }
    if (ctx->needs_input_grad(2)) {
      ghi = autograd::sum_to(where(crossed, g[0], where(above, g[0], where(at_hi, half, zero))), hi.sizes());
    }
    return {gx, glo, ghi};
  }
};
}  // namespace

Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  ANVIL_CHECK(lo.defined() || hi.defined(), "torch.clamp: At least one of 'min' or 'max' must not be None");
  // One bound is maximum / minimum, gradients included (as PyTorch's: a tie splits, against a
  // NaN both sides take it); integers have no gradients.
  if (!lo.defined()) return minimum(x, hi);
  if (!hi.defined()) return maximum(x, lo);
  if (!is_floating_point(result_type(x, lo))) return minimum(maximum(x, lo), hi);
  return ClampTensors::apply(x, lo, hi);
}
Tensor eq(const Tensor& a, const Tensor& b) { return Binary(OpId::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return Binary(OpId::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return Binary(OpId::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return Binary(OpId::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return Binary(OpId::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return Binary(OpId::Ge, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return Binary(OpId::LogicalAnd, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return Binary(OpId::LogicalOr, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return Binary(OpId::LogicalXor, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ANVIL_CHECK_TYPE(cond.dtype() == kBool, "where: expected condition to be a bool tensor, got ", cond.dtype());
  const ScalarType rt = result_type(a, b);
  return dispatch1(OpId::Where, {cond, a.dtype() == rt ? a : a.to(rt), b.dtype() == rt ? b : b.to(rt)}, Attrs());
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) { return where(cond, wrap_scalar(a, b.device()), b); }
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) { return where(cond, a, wrap_scalar(b, a.device())); }
Tensor where(const Tensor& cond, Scalar a, Scalar b) {
  return where(cond, wrap_scalar(a, cond.device()), wrap_scalar(b, cond.device()));
}
// Two passes each: the scale rides on add's alpha (a + alpha * b in the add kernel).
Tensor lerp(const Tensor& a, const Tensor& b, Scalar w) { return add(a, b - a, w); }
Tensor addcmul(const Tensor& s, const Tensor& t1, const Tensor& t2, Scalar v) { return add(s, t1 * t2, v); }
Tensor addcdiv(const Tensor& s, const Tensor& t1, const Tensor& t2, Scalar v) { return add(s, t1 / t2, v); }

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, wrap_scalar(b, a.device())); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, wrap_scalar(b, a.device())); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, wrap_scalar(b, a.device())); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, wrap_scalar(b, a.device())); }
Tensor operator+(Scalar a, const Tensor& b) { return add(wrap_scalar(a, b.device()), b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(wrap_scalar(a, b.device()), b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(wrap_scalar(a, b.device()), b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(wrap_scalar(a, b.device()), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, wrap_scalar(b, a.device())); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, wrap_scalar(b, a.device())); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, wrap_scalar(b, a.device())); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, wrap_scalar(b, a.device())); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, wrap_scalar(b, a.device())); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, wrap_scalar(b, a.device())); }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator~(const Tensor& a) { return logical_not(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator+=(Tensor& a, Scalar b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, Scalar b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, Scalar b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, Scalar b) { return a.div_(b); }

// ---- in-place methods ----
Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  CheckAlpha(dtype(), alpha);
  return BinaryInplace(OpId::Add, *this, o, Alpha(alpha), "add_");
}
Tensor& Tensor::add_(Scalar o, Scalar alpha) { return add_(wrap_scalar(o, device()), alpha); }
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  CheckAlpha(dtype(), alpha);
  return BinaryInplace(OpId::Sub, *this, o, Alpha(alpha), "sub_");
}
Tensor& Tensor::sub_(Scalar o, Scalar alpha) { return sub_(wrap_scalar(o, device()), alpha); }
Tensor& Tensor::mul_(const Tensor& o) { return BinaryInplace(OpId::Mul, *this, o, Attrs(), "mul_"); }
Tensor& Tensor::mul_(Scalar o) { return mul_(wrap_scalar(o, device())); }
Tensor& Tensor::div_(const Tensor& o) { return BinaryInplace(OpId::Div, *this, o, Attrs(), "div_"); }
Tensor& Tensor::div_(Scalar o) { return div_(wrap_scalar(o, device())); }
Tensor& Tensor::pow_(Scalar e) { return inplace_op(OpId::PowScalar, *this, {}, PowScalarArgs{e.to_double()}, "pow_"); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  return inplace_op(OpId::Clamp, *this, {}, ClampBounds(lo, hi, "clamp_"), "clamp_");
}

Tensor& Tensor::pow_(const Tensor& e) { return BinaryInplace(OpId::Pow, *this, e, Attrs(), "pow_"); }
Tensor& Tensor::remainder_(const Tensor& o) { return BinaryInplace(OpId::Remainder, *this, o, Attrs(), "remainder_"); }
// Composite in-place forms: the product or difference out of place, then one in-place add
// with alpha (two passes over the data; an optimizer's per-tensor path calls these on
// parameter-sized tensors, where the out-of-place form plus a copy took four).
Tensor& Tensor::lerp_(const Tensor& end, Scalar w) { return add_(end - *this, w); }
Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, Scalar v) { return add_(t1 * t2, v); }
Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, Scalar v) { return add_(t1 / t2, v); }

namespace {
Tensor& FillImpl(Tensor& self, Scalar value, const char* name) {
  check_inplace_allowed(self, name);
  if (GradMode::is_enabled() && self.requires_grad()) {
    return copy_into(self, full(self.sizes(), value, TensorOptions(self.dtype()).with_device(self.device())), name);
  }
  dispatch_into(OpId::Fill, {}, self, FillArgs{value.to_double()});
  self.storage()->bump_version(name);
  return self;
}
}  // namespace

Tensor& Tensor::zero_() { return FillImpl(*this, 0, "zero_"); }
Tensor& Tensor::fill_(Scalar value) { return FillImpl(*this, value, "fill_"); }
Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  return copy_into(*this, where(mask, wrap_scalar(value, device()), *this), "masked_fill_");
}

}  // namespace anvil
