// Recurrent layers with PyTorch's equations, parameter names, shapes and initialisation:
//   GRU:  r = s(W_ir x + b_ir + W_hr h + b_hr), z = s(W_iz x + b_iz + W_hz h + b_hz),
//         n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h
//   LSTM: i, f, g, o = s(.), s(.), tanh(.), s(.) of W_i* x + b_i* + W_h* h + b_h*;
//         c' = f * c + i * g, h' = o * tanh(c')
// weight_ih_l{k} [G*H, in], weight_hh_l{k} [G*H, H], bias_ih_l{k}, bias_hh_l{k} (G = 3 or 4,
// gates in the order above), all U(-1/sqrt(H), 1/sqrt(H)). The input projections of all time
// steps are one matmul; the recurrence runs step by step. Inputs [T, B, F], or [B, T, F] with
// batch_first; dropout between layers in training mode only.
#pragma once

#include <string>
#include <vector>

#include "core/nn/module.h"

namespace anvil::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool batch_first = false;
  double dropout = 0.0;  // between layers
  bool bias = true;
  std::string nonlinearity = "tanh";  // the Elman RNN's: "tanh" or "relu" (LSTM and GRU ignore it)
};

struct RNNOutput {
  Tensor output;  // [T, B, H] (or [B, T, H]): the last layer's hidden state at every step
  Tensor h_n;     // [num_layers, B, H]
  Tensor c_n;     // LSTM only
};

class RNNBase : public Module {
 public:
  // One-tensor forward: the output sequence (for Sequential).
  Tensor forward(const Tensor& x) override { return forward_all(x).output; }
  // h0 / c0: [num_layers, B, H]; zeros when undefined.
  RNNOutput forward_all(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  std::string extra_repr() const override;
  int64_t hidden_size() const { return hidden_; }

 protected:
  RNNBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, const RNNOptions& options);

 private:
  // One layer over the whole sequence [T, B, F] -> [T, B, H]; the last h (and c) when asked.
  Tensor RunLayer(const Tensor& layer_in, const Tensor* w, const Tensor& h0, const Tensor& c0, Tensor* h_out,
                  Tensor* c_out) const;
  // The inputs of layer `layer`'s ONNX GRU / LSTM / RNN node: X, W, R, B (gates in ONNX's
  // order), no sequence_lens, initial_h (and initial_c) when given.
  std::vector<Tensor> OnnxRecurrentInputs(const Tensor& x, const Tensor* w, const Tensor& h0, const Tensor& c0,
                                          int64_t layer) const;

  int64_t gates_, input_, hidden_;
  RNNOptions options_;
  // Per layer: weight_ih, weight_hh, bias_ih, bias_hh (registered members need stable
  // addresses: the vector is sized once in the constructor).
  std::vector<Tensor> weights_;
};

// The Elman RNN: h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), act tanh or relu.
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {})
      : RNNBase("RNN", 1, input_size, hidden_size, options) {}
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {})
      : RNNBase("GRU", 3, input_size, hidden_size, options) {}
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {})
      : RNNBase("LSTM", 4, input_size, hidden_size, options) {}
};

}  // namespace anvil::nn
