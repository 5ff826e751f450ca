// Transforms: see transforms.h.
#include "core/data/transforms.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "core/data/sample_random.h"
#include "core/ops/functions.h"
#include "core/tensor/random.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

std::string Join(const std::vector<double>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// The channel dim of a CHW or NCHW input; `who` names the transform in the error.
int64_t ChannelDim(const Tensor& x, const char* who) {
  ANVIL_CHECK(x.dim() == 3 || x.dim() == 4, who, ": expected a CHW or NCHW tensor, got ", x.dim(), " dims");
  return x.dim() - 3;
}

// A per-channel vector shaped [C, 1, 1] so that it broadcasts over (N)CHW.
Tensor PerChannel(const std::vector<double>& v, const Tensor& like) {
  const auto n = static_cast<int64_t>(v.size());
  return tensor(v, IntArray{n, 1, 1}).to(like.device(), like.dtype());
}

void CheckChannels(const Tensor& x, int64_t cdim, size_t expected, const char* who) {
  ANVIL_CHECK(x.size(cdim) == static_cast<int64_t>(expected), who, ": expected ", expected,
              " channels (one per mean/std entry), got ", x.size(cdim),
              " channels in a tensor of "
              "shape ",
              shape_str(x.sizes()));
}

void CheckSpatial(const Tensor& x, const char* who) {
  ANVIL_CHECK(x.dim() >= 2, who, ": expected a tensor with at least 2 dims (..., H, W), got ", x.dim());
}

}  // namespace

Transform::~Transform() = default;

// ---- Compose / Lambda ----

Compose::Compose(std::vector<std::shared_ptr<Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i) {
    ANVIL_CHECK(transforms_[i] != nullptr, "Compose: transform ", i, " is null");
  }
}

Tensor Compose::operator()(const Tensor& x) const {
  Tensor y = x;
  for (const auto& t : transforms_) y = (*t)(y);
  return y;
}

std::string Compose::name() const {
  std::string s = "Compose(";
  for (size_t i = 0; i < transforms_.size(); ++i) s += (i ? ", " : "") + transforms_[i]->name();
  return s + ")";
}

Lambda::Lambda(std::function<Tensor(const Tensor&)> fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {
  ANVIL_CHECK(static_cast<bool>(fn_), "Lambda: the function is empty");
}

Tensor Lambda::operator()(const Tensor& x) const { return fn_(x); }

// ---- ToTensor ----

Tensor ToTensor::operator()(const Tensor& x) const {
  ANVIL_CHECK(x.dim() == 2 || x.dim() == 3, "ToTensor: expected an HW or HWC array, got ", x.dim(), " dims");
  Tensor chw = x.dim() == 2 ? x.unsqueeze(0) : x.permute({2, 0, 1});
  // copy=true: the result never aliases the caller's array, even for float32 HW input.
  Tensor y = chw.to(kFloat32, /*non_blocking=*/false, /*copy=*/true).contiguous();
  // Only uint8 is known to be 8-bit-per-channel image data; any other dtype may hold sensor
  // values (e.g. 12-bit bands stored as int16) where /255 would silently corrupt the scale.
  if (x.dtype() == kUInt8) y.div_(255.0);  // y is our own copy: scale it in place
  return y;
}

// ---- Normalize / BandScale ----

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  ANVIL_CHECK(!mean_.empty(), "Normalize: mean is empty");
  ANVIL_CHECK(mean_.size() == std_.size(), "Normalize: expected mean and std of the same length, got ", mean_.size(),
              " and ", std_.size());
  for (size_t i = 0; i < std_.size(); ++i) {
    ANVIL_CHECK(std_[i] != 0.0, "Normalize: std[", i, "] is zero; dividing by it would give inf/nan");
  }
}

Tensor Normalize::operator()(const Tensor& x) const {
  const int64_t cdim = ChannelDim(x, "Normalize");
  ANVIL_CHECK(x.is_floating_point(),
              "Normalize: expected a floating-point tensor (apply ToTensor "
              "first), got ",
              x.dtype());
  CheckChannels(x, cdim, mean_.size(), "Normalize");
  return (x - PerChannel(mean_, x)) / PerChannel(std_, x);
}

std::string Normalize::name() const { return "Normalize(mean=" + Join(mean_) + ", std=" + Join(std_) + ")"; }

BandScale::BandScale(std::vector<double> scale, std::vector<double> offset)
    : scale_(std::move(scale)), offset_(std::move(offset)) {
  ANVIL_CHECK(!scale_.empty(), "BandScale: scale is empty");
  ANVIL_CHECK(scale_.size() == offset_.size(), "BandScale: expected scale and offset of the same length, got ",
              scale_.size(), " and ", offset_.size());
}

Tensor BandScale::operator()(const Tensor& x) const {
  const int64_t cdim = ChannelDim(x, "BandScale");
  const Tensor xf = x.is_floating_point() ? x : x.to(kFloat32);
  ANVIL_CHECK(xf.size(cdim) == static_cast<int64_t>(scale_.size()), "BandScale: expected ", scale_.size(),
              " bands (one per scale/offset entry), got ", xf.size(cdim), " bands in a tensor of shape ",
              shape_str(xf.sizes()));
  return xf * PerChannel(scale_, xf) + PerChannel(offset_, xf);
}

std::string BandScale::name() const { return "BandScale(scale=" + Join(scale_) + ", offset=" + Join(offset_) + ")"; }

// ---- random transforms ----

void RandomTransform::set_seed(uint64_t seed) {
  seed_ = seed;
  calls_.store(0);
}

std::array<uint32_t, 4> RandomTransform::NextDraw() const {
  // Inside a DataLoader the draw belongs to the sample, not to this object's call order,
  // which depends on thread scheduling (see sample_random.h).
  if (sample_random_active()) return sample_random_draw(seed_);
  return philox4x32(seed_, calls_.fetch_add(1));
}

RandomHorizontalFlip::RandomHorizontalFlip(double p, uint64_t seed) : RandomTransform(seed), p_(p) {
  ANVIL_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: expected p in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x) const {
  CheckSpatial(x, "RandomHorizontalFlip");
  // Draw even when the answer is certain, so the call index always advances by one.
  const double u = NextDraw()[0] * (1.0 / 4294967296.0);  // uniform in [0, 1)
  if (!(u < p_)) return x;
  const int64_t w = x.size(-1);
  std::vector<int64_t> rev(static_cast<size_t>(w));
  for (int64_t i = 0; i < w; ++i) rev[static_cast<size_t>(i)] = w - 1 - i;
  return index_select(x, x.dim() - 1, tensor(rev).to(x.device()));
}

std::string RandomHorizontalFlip::name() const { return "RandomHorizontalFlip(p=" + std::to_string(p_) + ")"; }

CenterCrop::CenterCrop(int64_t h, int64_t w) : h_(h), w_(w) {
  ANVIL_CHECK(h > 0 && w > 0, "CenterCrop: expected a positive size, got ", h, "x", w);
}

Tensor CenterCrop::operator()(const Tensor& x) const {
  CheckSpatial(x, "CenterCrop");
  const int64_t H = x.size(-2), W = x.size(-1);
  ANVIL_CHECK(h_ <= H && w_ <= W, "CenterCrop: crop ", h_, "x", w_, " does not fit in a ", H, "x", W, " input");
  // nearbyint rounds half to even in the default rounding mode, matching Python's round().
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(H - h_) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(W - w_) / 2.0));
  return x.narrow(x.dim() - 2, top, h_).narrow(x.dim() - 1, left, w_).contiguous();
}

std::string CenterCrop::name() const { return "CenterCrop(" + std::to_string(h_) + ", " + std::to_string(w_) + ")"; }

RandomCrop::RandomCrop(int64_t h, int64_t w, int64_t padding, uint64_t seed)
    : RandomTransform(seed), h_(h), w_(w), padding_(padding) {
  ANVIL_CHECK(h > 0 && w > 0, "RandomCrop: expected a positive size, got ", h, "x", w);
  ANVIL_CHECK(padding >= 0, "RandomCrop: expected a non-negative padding, got ", padding);
}

Tensor RandomCrop::operator()(const Tensor& x) const {
  CheckSpatial(x, "RandomCrop");
  const int64_t hd = x.dim() - 2, wd = x.dim() - 1;
  const int64_t H = x.size(hd) + 2 * padding_, W = x.size(wd) + 2 * padding_;
  ANVIL_CHECK(h_ <= H && w_ <= W, "RandomCrop: crop ", h_, "x", w_, " does not fit in a ", H, "x", W,
              " input (after padding ", padding_, ")");
  const auto r = NextDraw();
  // 64 bits per coordinate keeps the modulo bias below 2^-40 for any realistic image size.
  const uint64_t top_bits = (uint64_t{r[0]} << 32) | r[1];
  const uint64_t left_bits = (uint64_t{r[2]} << 32) | r[3];
  const auto top = static_cast<int64_t>(top_bits % static_cast<uint64_t>(H - h_ + 1));
  const auto left = static_cast<int64_t>(left_bits % static_cast<uint64_t>(W - w_ + 1));
  Tensor src = x;
  if (padding_ > 0) {
    IntArray sizes = x.sizes();
    sizes[static_cast<size_t>(hd)] = H;
    sizes[static_cast<size_t>(wd)] = W;
    src = zeros(sizes, TensorOptions(x.dtype()).with_device(x.device()));
    src.narrow(hd, padding_, x.size(hd)).narrow(wd, padding_, x.size(wd)).copy_(x);
  }
  return src.narrow(hd, top, h_).narrow(wd, left, w_).contiguous();
}

std::string RandomCrop::name() const {
  return "RandomCrop(" + std::to_string(h_) + ", " + std::to_string(w_) + ", padding=" + std::to_string(padding_) + ")";
}

}  // namespace anvil::data
