// RNN (Elman), GRU and LSTM: see rnn.h.
#include "core/nn/rnn.h"

#include <cmath>

#include "core/nn/functional.h"
#include "core/nn/init.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {

RNNBase::RNNBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, const RNNOptions& o)
    : Module(type), gates_(gates), input_(input_size), hidden_(hidden_size), options_(o) {
  ANVIL_CHECK(input_size > 0 && hidden_size > 0 && o.num_layers >= 1, type,
              ": expected positive input_size, hidden_size and num_layers");
  ANVIL_CHECK(o.dropout >= 0.0 && o.dropout < 1.0, type, ": expected dropout in [0, 1), got ", o.dropout);
  ANVIL_CHECK(o.nonlinearity == "tanh" || o.nonlinearity == "relu", type, ": unknown nonlinearity '", o.nonlinearity,
              "' (expected 'tanh' or 'relu')");
  weights_.resize(static_cast<size_t>(4 * o.num_layers));
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const std::string k = std::to_string(l);
    Tensor* w = &weights_[static_cast<size_t>(4 * l)];
    w[0] = empty({gates * hidden_size, l == 0 ? input_size : hidden_size});
    w[1] = empty({gates * hidden_size, hidden_size});
    for (int i = 0; i < (o.bias ? 4 : 2); ++i) {
      if (i >= 2) w[i] = empty({gates * hidden_size});
      init::uniform_(w[i], -bound, bound);
    }
    register_parameter("weight_ih_l" + k, w[0]);
    register_parameter("weight_hh_l" + k, w[1]);
    if (o.bias) {
      register_parameter("bias_ih_l" + k, w[2]);
      register_parameter("bias_hh_l" + k, w[3]);
    }
  }
}

RNNOutput RNNBase::forward_all(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  ANVIL_CHECK(input.dim() == 3 && input.size(2) == input_, type_name(), "(", input_, ", ", hidden_,
              "): expected input [T, B, ", input_, "] (or [B, T, ", input_, "] with batch_first), got ", input.dim(),
              " dims with last size ", input.dim() ? input.size(-1) : 0);
  const Tensor x = options_.batch_first ? input.transpose(0, 1) : input;  // [T, B, F]
  const int64_t T = x.size(0), B = x.size(1), H = hidden_, L = options_.num_layers;
  const bool lstm = gates_ == 4;
  auto initial = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return zeros({L, B, H}, TensorOptions(x.dtype()).with_device(x.device()));
    ANVIL_CHECK(t.dim() == 3 && t.size(0) == L && t.size(1) == B && t.size(2) == H, type_name(), ": expected ", name,
                " [", L, ", ", B, ", ", H, "]");
    return t;
  };
  const Tensor h_init = initial(h0, "h0");
  const Tensor c_init = lstm ? initial(c0, "c0") : Tensor();
  Tensor layer_in = x;
  std::vector<Tensor> h_last, c_last;
  for (int64_t l = 0; l < L; ++l) {
    const Tensor* w = &weights_[static_cast<size_t>(4 * l)];
    // Input projections of every step at once: [T, B, G*H].
    const Tensor gi = linear(layer_in, w[0], w[2]);
    Tensor h = h_init[l], c = lstm ? c_init[l] : Tensor();
    std::vector<Tensor> outputs;
    outputs.reserve(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const Tensor gh = linear(h, w[1], w[3]);  // [B, G*H]
      const Tensor gx = gi[t];
      if (gates_ == 1) {  // Elman
        h = options_.nonlinearity == "relu" ? relu(gx + gh) : tanh(gx + gh);
      } else if (lstm) {
        const Tensor g = gx + gh;
        const Tensor i = sigmoid(g.narrow(1, 0, H)), f = sigmoid(g.narrow(1, H, H));
        const Tensor gg = tanh(g.narrow(1, 2 * H, H)), o = sigmoid(g.narrow(1, 3 * H, H));
        c = f * c + i * gg;
        h = o * tanh(c);
      } else {
        const Tensor r = sigmoid(gx.narrow(1, 0, H) + gh.narrow(1, 0, H));
        const Tensor z = sigmoid(gx.narrow(1, H, H) + gh.narrow(1, H, H));
        const Tensor n = tanh(gx.narrow(1, 2 * H, H) + r * gh.narrow(1, 2 * H, H));
        h = (1.0 - z) * n + z * h;
      }
      outputs.push_back(h);
    }
    h_last.push_back(h);
    if (lstm) c_last.push_back(c);
    layer_in = stack(outputs, 0);
    if (l + 1 < L && options_.dropout > 0) layer_in = functional::dropout(layer_in, options_.dropout, is_training());
  }
  RNNOutput out;
  out.output = options_.batch_first ? layer_in.transpose(0, 1) : layer_in;
  out.h_n = stack(h_last, 0);
  if (lstm) out.c_n = stack(c_last, 0);
  return out;
}

std::string RNNBase::extra_repr() const {
  return std::to_string(input_) + ", " + std::to_string(hidden_) +
         ", num_layers=" + std::to_string(options_.num_layers) + (options_.batch_first ? ", batch_first=true" : "");
}

}  // namespace anvil::nn
