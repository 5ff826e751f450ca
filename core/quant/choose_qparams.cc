#include "core/quant/choose_qparams.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace anvil::quant {

ChosenQParams choose_quantization_params(float min, float max, int32_t qmin, int32_t qmax, bool preserve_sparsity,
                                         bool reduce_range) {
  ANVIL_CHECK(min <= max, "choose_quantization_params: min should be less than or equal to max, got min ", min,
              " and max ", max);
  if (reduce_range) {
    qmin /= 2;
    qmax /= 2;
  }
  if (min < 0 && max > 0 && preserve_sparsity) {
    const int symmetric_qmin = -((qmax - qmin) / 2 + 1);
    const int symmetric_qmax = (qmax - qmin) / 2;
    const double max_scale = std::max(std::fabs(min / symmetric_qmin), std::fabs(max / symmetric_qmax));
    min = static_cast<float>(max_scale * symmetric_qmin);
    max = static_cast<float>(max_scale * symmetric_qmax);
  }
  // 0 must be exactly representable.
  min = std::min(min, 0.0f);
  max = std::max(max, 0.0f);
  ANVIL_CHECK(qmin < qmax, "choose_quantization_params: qmin should be less than qmax, got ", qmin, " and ", qmax);
  double scale = (static_cast<double>(max) - min) / (qmax - qmin);
  // Kernels multiply by the reciprocal of the scale: it must be finite.
  if (static_cast<float>(scale) == 0.0f || std::isinf(1.0f / static_cast<float>(scale))) scale = 0.1;
  constexpr float kSmallScale = 6.1e-5f;
  if (scale < kSmallScale) {
    const float org_scale = static_cast<float>(scale);
    scale = kSmallScale;
    if (min == 0.0f) {
      max = kSmallScale * static_cast<float>(qmax - qmin);
    } else if (max == 0.0f) {
      min = -kSmallScale * static_cast<float>(qmax - qmin);
    } else {
      const float amplifier = kSmallScale / org_scale;
      min *= amplifier;
      max *= amplifier;
    }
  }
  const double zp_from_min = qmin - min / scale;
  const double zp_from_max = qmax - max / scale;
  // ATen's error terms (differences, where fbgemm's copy adds them).
  const double zp_from_min_error = std::abs(qmin) - std::abs(min / scale);
  const double zp_from_max_error = std::abs(qmax) - std::abs(max / scale);
  double initial = zp_from_min_error < zp_from_max_error ? zp_from_min : zp_from_max;
  if (min < 0 && max > 0 && preserve_sparsity) initial = static_cast<double>(qmin + qmax) / 2;
  int32_t zp;
  if (initial < qmin) {
    zp = qmin;
  } else if (initial > qmax) {
    zp = qmax;
  } else {
    zp = static_cast<int32_t>(std::nearbyint(initial));
  }
  return {scale, zp};
}

ChosenQParams choose_qparams_per_tensor(const std::vector<float>& x, bool reduce_range) {
  ANVIL_CHECK(!x.empty(), "choose_qparams_per_tensor: expected a non-empty tensor");
  const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
  return choose_quantization_params(*mn, *mx, 0, 255, /*preserve_sparsity=*/false, reduce_range);
}

}  // namespace anvil::quant
