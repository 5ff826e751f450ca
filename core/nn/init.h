// Parameter initialisation, after torch.nn.init. Every function fills its tensor in place
// without recording autograd history, drawing from the default generator (anvil::manual_seed
// makes a model's initial weights reproducible).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/tensor/tensor.h"

namespace anvil::nn::init {

// (fan_in, fan_out) of a weight: [out, in] for Linear, [out, in/groups, k...] for Conv
// (times the receptive field).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight);

// The recommended gain for a nonlinearity: "linear"/"sigmoid" 1, "tanh" 5/3, "relu" sqrt(2),
// "leaky_relu" sqrt(2 / (1 + slope^2)), "selu" 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double low, double high);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a). PyTorch's
// Linear and Conv use a = sqrt(5) with leaky_relu, which gives b = 1 / sqrt(fan_in).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, bool fan_in = true, const std::string& nonlinearity = "leaky_relu");
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, bool fan_in = true, const std::string& nonlinearity = "leaky_relu");
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0);

}  // namespace anvil::nn::init
