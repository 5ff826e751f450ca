#include "core/data/datasets/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/data/philox_stream.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

// Distinct Philox subsequences keep the streams of different purposes disjoint even if two
// mixed keys were ever to coincide.
constexpr uint64_t kCenterStream = 1;
constexpr uint64_t kSampleStream = 2;

// Standard normal draws by the Box-Muller transform, both outputs of each pair used.
class NormalStream {
 public:
  explicit NormalStream(PhiloxStream& s) : s_(s) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(s_.UniformOpen()));
    const double theta = 2.0 * std::numbers::pi * s_.UniformOpen();
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  PhiloxStream& s_;
  double spare_ = 0;
  bool has_spare_ = false;
};

void CheckCounts(const char* fn, int64_t n, int64_t num_classes) {
  ANVIL_CHECK(n >= 0, fn, ": n must be >= 0, got ", n);
  ANVIL_CHECK(num_classes >= 1, fn, ": num_classes must be >= 1, got ", num_classes);
}

}  // namespace

Tensor blob_centers(int64_t num_classes, int64_t num_features, uint64_t seed) {
  CheckCounts("blob_centers", 0, num_classes);
  ANVIL_CHECK(num_features >= 1, "blob_centers: num_features must be >= 1, got ", num_features);
  PhiloxStream s(seed, kCenterStream);
  std::vector<float> centers(static_cast<size_t>(num_classes * num_features));
  for (float& c : centers) c = static_cast<float>(-10.0 + 20.0 * s.UniformOpen());
  return tensor(centers, IntArray{num_classes, num_features});
}

TensorDataset make_blobs(int64_t n, int64_t num_classes, int64_t num_features, double cluster_std, uint64_t seed) {
  CheckCounts("make_blobs", n, num_classes);
  ANVIL_CHECK(cluster_std >= 0, "make_blobs: cluster_std must be >= 0, got ", cluster_std);
  const std::vector<float> centers = blob_centers(num_classes, num_features, seed).to_vector<float>();
  std::vector<float> x(static_cast<size_t>(n * num_features));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i % num_classes;
    PhiloxStream s(MixKey(seed, static_cast<uint64_t>(i)), kSampleStream);
    NormalStream normal(s);
    for (int64_t f = 0; f < num_features; ++f) {
      const double c = centers[static_cast<size_t>(k * num_features + f)];
      x[static_cast<size_t>(i * num_features + f)] = static_cast<float>(c + cluster_std * normal.Next());
    }
    y[static_cast<size_t>(i)] = k;
  }
  return TensorDataset(tensor(x, IntArray{n, num_features}), tensor(y));
}

TensorDataset make_spirals(int64_t n, int64_t num_classes, double noise, uint64_t seed) {
  CheckCounts("make_spirals", n, num_classes);
  ANVIL_CHECK(noise >= 0, "make_spirals: noise must be >= 0, got ", noise);
  std::vector<float> x(static_cast<size_t>(n * 2));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i % num_classes;
    const int64_t count = (n - k + num_classes - 1) / num_classes;  // samples of class k
    const double r = (static_cast<double>(i / num_classes) + 0.5) / static_cast<double>(count);
    const double angle = 2.0 * std::numbers::pi * (static_cast<double>(k) / static_cast<double>(num_classes) + r);
    PhiloxStream s(MixKey(seed, static_cast<uint64_t>(i)), kSampleStream);
    NormalStream normal(s);
    x[static_cast<size_t>(2 * i)] = static_cast<float>(r * std::cos(angle) + noise * normal.Next());
    x[static_cast<size_t>(2 * i + 1)] = static_cast<float>(r * std::sin(angle) + noise * normal.Next());
    y[static_cast<size_t>(i)] = k;
  }
  return TensorDataset(tensor(x, IntArray{n, 2}), tensor(y));
}

RandomImages::RandomImages(int64_t n, int64_t height, int64_t width, int64_t channels, int64_t num_classes,
                           uint64_t seed)
    : n_(n), height_(height), width_(width), channels_(channels), num_classes_(num_classes), seed_(seed) {
  CheckCounts("RandomImages", n, num_classes);
  ANVIL_CHECK(height >= 1 && width >= 1 && channels >= 1, "RandomImages: height, width and channels must be >= 1, got ",
              height, "x", width, "x", channels);
}

Example RandomImages::get(int64_t index) const {
  CheckIndex(index);
  PhiloxStream s(MixKey(seed_, static_cast<uint64_t>(index)), kSampleStream);
  // A coarse grid of random levels, bilinearly interpolated: image-like smooth regions, so
  // encoders and crops behave as on photos rather than on white noise.
  const int64_t gh = std::min<int64_t>(height_, 4), gw = std::min<int64_t>(width_, 4);
  std::vector<double> grid(static_cast<size_t>(gh * gw * channels_));
  for (double& g : grid) g = static_cast<double>(s.UniformInt(256));
  auto at = [&](int64_t gy, int64_t gx, int64_t c) {
    return grid[static_cast<size_t>((gy * gw + gx) * channels_ + c)];
  };
  // Maps pixel p of `size` onto the grid of `cells` points: the cell index and the fraction.
  auto locate = [](int64_t p, int64_t size, int64_t cells, int64_t& cell, double& frac) {
    const double pos =
        size > 1 ? static_cast<double>(p) * static_cast<double>(cells - 1) / static_cast<double>(size - 1) : 0.0;
    cell = std::min<int64_t>(static_cast<int64_t>(pos), std::max<int64_t>(cells - 2, 0));
    frac = pos - static_cast<double>(cell);
  };
  Tensor image = empty({height_, width_, channels_}, kUInt8);
  uint8_t* out = image.data_ptr<uint8_t>();
  for (int64_t y = 0; y < height_; ++y) {
    int64_t cy = 0;
    double fy = 0;
    locate(y, height_, gh, cy, fy);
    const int64_t cy1 = std::min(cy + 1, gh - 1);
    for (int64_t x = 0; x < width_; ++x) {
      int64_t cx = 0;
      double fx = 0;
      locate(x, width_, gw, cx, fx);
      const int64_t cx1 = std::min(cx + 1, gw - 1);
      for (int64_t c = 0; c < channels_; ++c) {
        const double top = at(cy, cx, c) * (1 - fx) + at(cy, cx1, c) * fx;
        const double bottom = at(cy1, cx, c) * (1 - fx) + at(cy1, cx1, c) * fx;
        const double noise = static_cast<double>(s.UniformInt(17)) - 8.0;  // -8..8
        const double v = std::clamp(top * (1 - fy) + bottom * fy + noise, 0.0, 255.0);
        *out++ = static_cast<uint8_t>(std::lround(v));
      }
    }
  }
  return Example{{Example::kInput, image}, {Example::kTarget, scalar_tensor(index % num_classes_, kInt64)}};
}

std::string RandomImages::name() const {
  return anvil::detail::StrCat("RandomImages(", n_, " samples, ", height_, "x", width_, "x", channels_, ", ",
                               num_classes_, " classes)");
}

}  // namespace anvil::data
