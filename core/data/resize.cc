// Resize: see transforms.h.
#include <cmath>
#include <vector>

#include "core/data/transforms.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "core/util/thread_pool.h"

namespace anvil::data {
namespace {

// For each output index: the two input indices and the weight of the second.
struct Taps {
  std::vector<int64_t> lo, hi;
  std::vector<double> frac;
};

Taps BilinearTaps(int64_t in, int64_t out) {
  Taps t;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    // Half-pixel centres (align_corners=False); clamped at 0 like PyTorch's source index.
    const double src = std::max((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0);
    const auto lo = std::min(static_cast<int64_t>(src), in - 1);
    t.lo.push_back(lo);
    t.hi.push_back(std::min(lo + 1, in - 1));
    t.frac.push_back(src - static_cast<double>(lo));
  }
  return t;
}

// Interpolates planes [P, H, W] -> [P, h, w] of contiguous T.
template <typename T>
void ResizePlanes(const T* in, T* out, int64_t planes, int64_t H, int64_t W, int64_t h, int64_t w) {
  const Taps ty = BilinearTaps(H, h), tx = BilinearTaps(W, w);
  parallel_for(0, planes * h, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t p = row / h, y = row % h;
      const T* r0 = in + (p * H + ty.lo[static_cast<size_t>(y)]) * W;
      const T* r1 = in + (p * H + ty.hi[static_cast<size_t>(y)]) * W;
      const auto fy = static_cast<T>(ty.frac[static_cast<size_t>(y)]);
      T* o = out + row * w;
      for (int64_t x = 0; x < w; ++x) {
        const auto xs = static_cast<size_t>(x);
        const auto fx = static_cast<T>(tx.frac[xs]);
        const T top = r0[tx.lo[xs]] + (r0[tx.hi[xs]] - r0[tx.lo[xs]]) * fx;
        const T bottom = r1[tx.lo[xs]] + (r1[tx.hi[xs]] - r1[tx.lo[xs]]) * fx;
        o[x] = top + (bottom - top) * fy;
      }
    }
  });
}

}  // namespace

Resize::Resize(int64_t h, int64_t w) : h_(h), w_(w) {
  ANVIL_CHECK(h > 0 && w > 0, "Resize: expected a positive size, got ", h, "x", w);
}

Resize::Resize(int64_t shorter_side) : shorter_(shorter_side) {
  ANVIL_CHECK(shorter_side > 0, "Resize: expected a positive size, got ", shorter_side);
}

Tensor Resize::operator()(const Tensor& x) const {
  ANVIL_CHECK(x.dim() >= 2, "Resize: expected a tensor with at least 2 dims (..., H, W), got ", x.dim());
  ANVIL_CHECK(x.device().is_cpu(), "Resize: expected a CPU tensor, got one on ", x.device());
  const int64_t H = x.size(-2), W = x.size(-1);
  ANVIL_CHECK(H > 0 && W > 0, "Resize: the input is empty (", H, "x", W, ")");
  int64_t h = h_, w = w_;
  if (shorter_ > 0) {
    // torchvision: the shorter side becomes `size`, the longer int(size * long / short).
    if (H <= W) {
      h = shorter_;
      w = shorter_ * W / H;
    } else {
      w = shorter_;
      h = shorter_ * H / W;
    }
  }
  IntArray out_sizes = x.sizes();
  out_sizes[out_sizes.size() - 2] = h;
  out_sizes[out_sizes.size() - 1] = w;
  const int64_t planes = x.numel() / (H * W);
  const ScalarType compute = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor src = x.to(compute).contiguous();
  Tensor out = empty(out_sizes, TensorOptions(compute).with_device(x.device()));
  if (compute == kFloat64) {
    ResizePlanes(src.data_ptr<double>(), out.data_ptr<double>(), planes, H, W, h, w);
  } else {
    ResizePlanes(src.data_ptr<float>(), out.data_ptr<float>(), planes, H, W, h, w);
  }
  if (x.is_floating_point()) return out.to(x.dtype());
  return round(out).to(x.dtype());  // round half to even, as torch.round
}

std::string Resize::name() const {
  if (shorter_ > 0) return "Resize(" + std::to_string(shorter_) + ")";
  return "Resize(" + std::to_string(h_) + ", " + std::to_string(w_) + ")";
}

}  // namespace anvil::data
