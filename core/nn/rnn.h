// Recurrent layers with PyTorch's equations, parameter names, shapes and initialisation:
//   GRU:  r = s(W_ir x + b_ir + W_hr h + b_hr), z = s(W_iz x + b_iz + W_hz h + b_hz),
//         n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h
//   LSTM: i, f, g, o = s(.), s(.), tanh(.), s(.) of W_i* x + b_i* + W_h* h + b_h*;
//         c' = f * c + i * g, h' = o * tanh(c')
// weight_ih_l{k} [G*H, in], weight_hh_l{k} [G*H, H], bias_ih_l{k}, bias_hh_l{k} (G = 3 or 4,
// gates in the order above), all U(-1/sqrt(H), 1/sqrt(H)). The input projections of all time
// steps are one matmul; the recurrence runs step by step. Inputs [T, B, F], or [B, T, F] with
// batch_first, or unbatched [T, F]; dropout between layers in training mode only.
// bidirectional: each layer also runs the sequence backwards with its own weights (the same
// names with a "_reverse" suffix, registered after the forward direction's, as PyTorch does);
// a layer's output is [forward, backward] along the feature dim, so layer k > 0 reads 2*H
// features, and h_n's entry for layer k, direction d is at k * 2 + d.
// proj_size (LSTM only, 0 < P < H): h' = W_hr (o * tanh(c')), weight_hr_l{k} [P, H] registered
// after the biases; h (so output, h_n and h0) has P features, c keeps H, weight_hh is [4H, P]
// and layer k > 0 reads D*P features. ONNX's LSTM has no projection: export refuses it.
// Thread-safety: as every module (module.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/nn/module.h"

namespace anvil::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool batch_first = false;
  double dropout = 0.0;  // between layers
  bool bias = true;
  std::string nonlinearity = "tanh";  // the Elman RNN's: "tanh" or "relu" (LSTM and GRU ignore it)
  bool bidirectional = false;
  int64_t proj_size = 0;  // LSTM only; 0: no projection
};

// D = 2 when bidirectional, else 1. Unbatched input gives every tensor without its B dim.
struct RNNOutput {
  Tensor output;  // [T, B, D*R] (or [B, T, D*R]): the last layer's hidden state at every step
  Tensor h_n;     // [D*num_layers, B, R]: each layer's and direction's final state
  Tensor c_n;     // LSTM only, [D*num_layers, B, H]
  // (R = proj_size when the LSTM projects, else H.)
};

class RNNBase : public Module {
 public:
  // One-tensor forward: the output sequence (for Sequential).
  Tensor forward(const Tensor& x) override { return forward_all(x).output; }
  // h0 [D*num_layers, B, R] / c0 [D*num_layers, B, H] (without B for unbatched input); zeros
  // when undefined.
  RNNOutput forward_all(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  std::string extra_repr() const override;
  int64_t hidden_size() const { return hidden_; }
  bool bidirectional() const { return options_.bidirectional; }
  int64_t num_directions() const { return options_.bidirectional ? 2 : 1; }
  // The size of h: proj_size when the LSTM projects, else hidden_size.
  int64_t state_size() const { return options_.proj_size > 0 ? options_.proj_size : hidden_; }
  int64_t num_layers() const { return options_.num_layers; }

  // The recurrence's matrix products x W^T + b, for weight `which` of `slot` (layer *
  // num_directions + direction): kInputWeight (weight_ih with bias_ih), kHiddenWeight
  // (weight_hh with bias_hh), kProjectionWeight (weight_hr). Plain float linear unless a
  // replacement is installed: int8 dynamic quantization (core/quant/quantize.h) installs one
  // that owns int8 copies of the weights.
  static constexpr int kInputWeight = 0, kHiddenWeight = 1, kProjectionWeight = 4;
  class Linears {
   public:
    virtual ~Linears() = default;
    virtual Tensor apply(const Tensor& x, int64_t slot, int which) const = 0;
  };
  void set_linears(std::shared_ptr<const Linears> linears) { linears_ = std::move(linears); }
  const Linears* linears() const { return linears_.get(); }
  // Weight `which` (0..4: weight_ih, weight_hh, bias_ih, bias_hh, weight_hr) of `slot`;
  // undefined when absent. Mutable: quantization releases the float matrices it replaced.
  Tensor& weight(int64_t slot, int which) { return weights_[static_cast<size_t>(kWeightsPerDirection * slot + which)]; }
  int64_t num_slots() const { return options_.num_layers * num_directions(); }
  // The parameter name of weight `which` of `slot` ("weight_ih_l0_reverse").
  std::string weight_name(int64_t slot, int which) const;

 protected:
  RNNBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, const RNNOptions& options);

 private:
  // One direction of one layer over the whole sequence [T, B, F] -> [T, B, H] (`reverse`:
  // from the last step to the first, each output at its own step); the final h (and c) when
  // asked.
  Tensor RunLayer(const Tensor& layer_in, const Tensor* w, const Tensor& h0, const Tensor& c0, bool reverse,
                  Tensor* h_out, Tensor* c_out) const;
  // The inputs of layer `layer`'s ONNX GRU / LSTM / RNN node: X, W, R, B (gates in ONNX's
  // order, one row per direction), no sequence_lens, initial_h (and initial_c) when given
  // ([D*num_layers, B, H]).
  std::vector<Tensor> OnnxRecurrentInputs(const Tensor& x, int64_t layer, const Tensor& h0, const Tensor& c0) const;
  // Weights of layer `layer`, direction `direction`: weight_ih, weight_hh, bias_ih, bias_hh,
  // weight_hr (undefined without a projection).
  static constexpr int64_t kWeightsPerDirection = 5;
  const Tensor* LayerWeights(int64_t layer, int64_t direction) const {
    return &weights_[static_cast<size_t>(kWeightsPerDirection * (layer * num_directions() + direction))];
  }

  // x W^T + b, through linears_ when installed.
  Tensor ApplyLinear(const Tensor& x, const Tensor* w, int which) const;

  int64_t gates_, input_, hidden_;
  RNNOptions options_;
  std::shared_ptr<const Linears> linears_;
  // Per layer and direction (layer-major): weight_ih, weight_hh, bias_ih, bias_hh, weight_hr (registered
  // members need stable addresses: the vector is sized once in the constructor).
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

// One step of a recurrent cell (PyTorch's RNNCell, GRUCell, LSTMCell): the same equations and
// parameters (weight_ih [G*H, in], weight_hh [G*H, H], bias_ih, bias_hh; U(-1/sqrt(H), 1/sqrt(H)))
// for one time step. Input [B, in] or unbatched [in]; the states [B, H] ([H]) default to zeros.
class RNNCellBase : public Module {
 public:
  int64_t hidden_size() const { return hidden_; }
  std::string extra_repr() const override;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias,
              std::string nonlinearity = "tanh");
  // h' (and c' for the LSTM cell) from input and states, unbatched handled.
  std::tuple<Tensor, Tensor> Step(const Tensor& input, const Tensor& h, const Tensor& c) const;

 private:
  int64_t gates_, input_, hidden_;
  bool bias_;
  std::string nonlinearity_;
};

// h' = act(W_ih x + b_ih + W_hh h + b_hh), act "tanh" or "relu".
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, std::string nonlinearity = "tanh")
      : RNNCellBase("RNNCell", 1, input_size, hidden_size, bias, std::move(nonlinearity)) {}
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& hx) { return std::get<0>(Step(input, hx, Tensor())); }
};

class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true)
      : RNNCellBase("GRUCell", 3, input_size, hidden_size, bias) {}
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& hx) { return std::get<0>(Step(input, hx, Tensor())); }
};

// forward(input, (h, c)) -> (h', c'), as libtorch's LSTMCell; the one-tensor forward gives h'.
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true)
      : RNNCellBase("LSTMCell", 4, input_size, hidden_size, bias) {}
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, std::nullopt)); }
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
    return hx ? Step(input, std::get<0>(*hx), std::get<1>(*hx)) : Step(input, Tensor(), Tensor());
  }
};

}  // namespace anvil::nn
