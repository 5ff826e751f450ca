// Convolution modules (NOTE [ Convolution as im2col ] in conv.cc says how they compute).
// Thread-safety: as every module (module.h): one training thread, or concurrent forwards in eval
// mode under NoGradGuard.
#pragma once

#include <array>

#include "core/nn/functional.h"
#include "core/nn/module.h"

namespace anvil::nn {

struct ConvOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  bool same = false;  // padding "same" (stride 1): output spatial size = input's
};

// Conv2d(in, out, {kh, kw}): weight [out, in / groups, kh, kw], PyTorch's initialisation.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel, const ConvOptions& options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const ConvOptions& options() const { return options_; }
  const std::array<int64_t, 2>& kernel_size() const { return kernel_; }

  Tensor weight, bias;
  int64_t in_channels, out_channels;

 private:
  std::array<int64_t, 2> kernel_;
  ConvOptions options_;
};

struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
  bool same = false;
};

// Conv1d(in, out, k) over [N, C, L]: weight [out, in / groups, k].
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, const Conv1dOptions& options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  int64_t in_channels, out_channels;

 private:
  int64_t kernel_;
  Conv1dOptions options_;
};

}  // namespace anvil::nn
