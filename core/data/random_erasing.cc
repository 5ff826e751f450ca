// RandomErasing: see transforms.h.
#include <cmath>
#include <numbers>
#include <sstream>
#include <vector>

#include "core/data/philox_stream.h"
#include "core/data/transforms.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

double Uniform(uint32_t r) { return r * (1.0 / 4294967296.0); }  // [0, 1)

}  // namespace

RandomErasing::RandomErasing(Options options, uint64_t seed) : RandomTransform(seed), options_(std::move(options)) {
  const Options& o = options_;
  ANVIL_CHECK(o.p >= 0.0 && o.p <= 1.0, "RandomErasing: expected p in [0, 1], got ", o.p);
  ANVIL_CHECK(o.scale.first > 0.0 && o.scale.first <= o.scale.second && o.scale.second <= 1.0,
              "RandomErasing: expected 0 < scale.min <= scale.max <= 1, got (", o.scale.first, ", ", o.scale.second,
              ")");
  ANVIL_CHECK(o.ratio.first > 0.0 && o.ratio.first <= o.ratio.second,
              "RandomErasing: expected 0 < ratio.min <= ratio.max, got (", o.ratio.first, ", ", o.ratio.second, ")");
  ANVIL_CHECK(o.random_value || !o.value.empty(), "RandomErasing: expected a fill value (or random_value)");
}

std::array<int64_t, 4> RandomErasing::NextRectangle(int64_t H, int64_t W) const {
  const Options& o = options_;
  if (!(Uniform(NextDraw()[0]) < o.p)) return {0, 0, 0, 0};
  const double area = static_cast<double>(H * W);
  const double log_lo = std::log(o.ratio.first), log_hi = std::log(o.ratio.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const auto r = NextDraw();
    const double erase_area = area * (o.scale.first + (o.scale.second - o.scale.first) * Uniform(r[0]));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * Uniform(r[1]));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < H && w < W) || h == 0 || w == 0) continue;
    // 32-bit draws modulo a span of at most a few thousand: the bias is below 1e-6.
    const auto top = static_cast<int64_t>(r[2] % static_cast<uint32_t>(H - h + 1));
    const auto left = static_cast<int64_t>(r[3] % static_cast<uint32_t>(W - w + 1));
    return {top, left, h, w};
  }
  return {0, 0, 0, 0};
}

Tensor RandomErasing::operator()(const Tensor& x) const {
  ANVIL_CHECK(x.dim() >= 3, "RandomErasing: expected a CHW or (..., C, H, W) tensor, got ", x.dim(), " dims");
  const int64_t C = x.size(-3), H = x.size(-2), W = x.size(-1);
  const auto [top, left, h, w] = NextRectangle(H, W);
  if (h == 0) return x;
  const auto& value = options_.value;
  ANVIL_CHECK(options_.random_value || value.size() == 1 || static_cast<int64_t>(value.size()) == C,
              "RandomErasing: expected 1 or ", C, " fill values (one per channel), got ", value.size());
  Tensor out = x.clone();
  Tensor window = out.narrow(-2, top, h).narrow(-1, left, w);
  if (options_.random_value) {
    // Noise from the same stream, so the erased content is reproducible too.
    const auto seed_block = NextDraw();
    PhiloxStream stream((uint64_t{seed_block[0]} << 32) | seed_block[1], 0);
    std::vector<double> noise(static_cast<size_t>(window.numel()));
    for (size_t i = 0; i < noise.size(); i += 2) {  // Box-Muller: two normals per two uniforms
      const double radius = std::sqrt(-2.0 * std::log(stream.UniformOpen()));
      const double angle = 2.0 * std::numbers::pi * stream.UniformOpen();
      noise[i] = radius * std::cos(angle);
      if (i + 1 < noise.size()) noise[i + 1] = radius * std::sin(angle);
    }
    window.copy_(tensor(noise, window.sizes()));
  } else if (value.size() == 1) {
    window.fill_(value[0]);
  } else {
    for (int64_t c = 0; c < C; ++c) window.select(-3, c).fill_(value[static_cast<size_t>(c)]);
  }
  return out;
}

std::string RandomErasing::name() const {
  std::ostringstream os;
  os << "RandomErasing(p=" << options_.p << ", scale=(" << options_.scale.first << ", " << options_.scale.second
     << "), ratio=(" << options_.ratio.first << ", " << options_.ratio.second << "))";
  return os.str();
}

}  // namespace anvil::data
