// HistogramObserver (torch.ao.quantization.observer): a running histogram of `bins` bins
// over [min_val, max_val]. A batch that widens the range is binned over the new range and
// the old histogram is carried over by PyTorch's upsampling (each bin split in 16, each
// piece's midpoint assigned to a bin of the new range). calculate_qparams() narrows the
// range by PyTorch's L2 search (_non_linear_param_search, from caffe2's norm minimization)
// and applies the MinMaxObserver formulas to the result. The arithmetic follows PyTorch's
// op by op (float32 tensors, Python floats in double), including torch.histc's binning and
// torch.linspace's evaluation, so that the bins, and so the chosen range, are the same.
// Thread-safety: none; as every observer (observer.h), it belongs to the one module and thread
// calibrating it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/quant/observer.h"

namespace anvil::quant {

class HistogramObserver : public UniformObserver {
 public:
  explicit HistogramObserver(int64_t bins = 2048, const ObserverOptions& options = {});
  // Ignores infinite values (PyTorch warns and drops them); an empty or all-infinite x is ignored.
  void forward(const Tensor& x) override;
  QParams calculate_qparams() const override;

  int64_t bins() const { return bins_; }
  float min_val() const { return min_val_; }
  float max_val() const { return max_val_; }
  const std::vector<float>& histogram() const { return histogram_; }

 private:
  std::vector<float> combine(const std::vector<float>& update, float new_min, float new_max) const;
  std::vector<float> upscale(float new_min, float new_max) const;
  double quantization_error(int64_t start_bin, int64_t end_bin) const;
  std::pair<float, float> non_linear_param_search() const;

  int64_t bins_;
  int64_t dst_nbins_;
  std::vector<float> histogram_;
  float min_val_, max_val_;
};

}  // namespace anvil::quant
