// Pooling modules over [N, C, H, W] (or [C, H, W]).
// Thread-safety: as every module (module.h).
#pragma once

#include <array>

#include "core/nn/functional.h"
#include "core/nn/module.h"

namespace anvil::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false);
  // Every option (dilation too), as PyTorch's MaxPool2d(kernel_size, stride, padding, dilation,
  // ceil_mode=...).
  explicit MaxPool2d(const functional::Pool2dParams& options);
  Tensor forward(const Tensor& x) override { return functional::max_pool2d(x, params_); }
  // The output and the maxima's indices (PyTorch's return_indices=True), for MaxUnpool2d.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {
    return functional::max_pool2d_with_indices(x, params_);
  }
  std::string extra_repr() const override;

 private:
  functional::Pool2dParams params_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true);
  // Every option (ceil_mode and divisor_override too).
  explicit AvgPool2d(const functional::Pool2dParams& options);
  Tensor forward(const Tensor& x) override { return functional::avg_pool2d(x, params_); }
  std::string extra_repr() const override;

 private:
  functional::Pool2dParams params_;
};

// MaxPool2d's partial inverse: forward(x, indices[, output_size]) writes each element of x at
// its index into zeros of the output size.
class MaxUnpool2d : public Module {
 public:
  explicit MaxUnpool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                       std::array<int64_t, 2> padding = {0, 0});
  // Unpooling needs the indices: forward(x) alone is refused with that said.
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Tensor& indices,
                 const std::optional<std::vector<int64_t>>& output_size = std::nullopt);
  std::string extra_repr() const override;

 private:
  functional::MaxUnpool2dParams params_;
};

// MaxPool1d / AvgPool1d / AdaptiveAvgPool1d over [N, C, L] or [C, L] (PyTorch's options).
class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(const functional::Pool1dParams& options) : Module("MaxPool1d"), params_(options) {}
  Tensor forward(const Tensor& x) override { return functional::max_pool1d(x, params_); }
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {
    return functional::max_pool1d_with_indices(x, params_);
  }
  std::string extra_repr() const override;

 private:
  functional::Pool1dParams params_;
};

class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(const functional::Pool1dParams& options) : Module("AvgPool1d"), params_(options) {}
  Tensor forward(const Tensor& x) override { return functional::avg_pool1d(x, params_); }
  std::string extra_repr() const override;

 private:
  functional::Pool1dParams params_;
};

class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size) : Module("AdaptiveAvgPool1d"), size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_avg_pool1d(x, size_); }
  std::string extra_repr() const override;

 private:
  int64_t size_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> output_size) : Module("AdaptiveAvgPool2d"), size_(output_size) {}
  Tensor forward(const Tensor& x) override { return functional::adaptive_avg_pool2d(x, size_); }
  std::string extra_repr() const override;

 private:
  std::array<int64_t, 2> size_;
};

}  // namespace anvil::nn
