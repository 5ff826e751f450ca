// Pooling modules over [N, C, H, W] (or [C, H, W]).
#pragma once

#include <array>

#include "core/nn/functional.h"
#include "core/nn/module.h"

namespace anvil::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override { return functional::max_pool2d(x, params_); }
  std::string extra_repr() const override;

 private:
  functional::Pool2dParams params_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override { return functional::avg_pool2d(x, params_); }
  std::string extra_repr() const override;

 private:
  functional::Pool2dParams params_;
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
