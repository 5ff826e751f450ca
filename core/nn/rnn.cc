// RNN (Elman), GRU and LSTM: see rnn.h.
#include "core/nn/rnn.h"

#include <cmath>
#include <optional>

#include "core/export/capture.h"
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
  ANVIL_CHECK(o.proj_size >= 0, type, ": proj_size should be a positive integer or zero to disable projections, got ",
              o.proj_size);
  ANVIL_CHECK(o.proj_size == 0 || gates == 4, "proj_size argument is only supported for LSTM, not RNN or GRU");
  ANVIL_CHECK(o.proj_size < hidden_size, type, ": proj_size has to be smaller than hidden_size (got proj_size ",
              o.proj_size, ", hidden_size ", hidden_size, ")");
  const int64_t D = num_directions(), R = state_size();
  weights_.resize(static_cast<size_t>(kWeightsPerDirection * o.num_layers * D));
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  // PyTorch's registration order (layer-major, forward before reverse), so that parameters()
  // and the state dict list the same tensors in the same order.
  for (int64_t l = 0; l < o.num_layers; ++l) {
    for (int64_t d = 0; d < D; ++d) {
      const std::string k = std::to_string(l) + (d == 1 ? "_reverse" : "");
      Tensor* w = &weights_[static_cast<size_t>(kWeightsPerDirection * (l * D + d))];
      w[0] = empty({gates * hidden_size, l == 0 ? input_size : D * R});
      w[1] = empty({gates * hidden_size, R});
      for (int i = 0; i < (o.bias ? 4 : 2); ++i) {
        if (i >= 2) w[i] = empty({gates * hidden_size});
        init::uniform_(w[i], -bound, bound);
      }
      if (o.proj_size > 0) {
        w[4] = empty({R, hidden_size});
        init::uniform_(w[4], -bound, bound);
      }
      register_parameter("weight_ih_l" + k, w[0]);
      register_parameter("weight_hh_l" + k, w[1]);
      if (o.bias) {
        register_parameter("bias_ih_l" + k, w[2]);
        register_parameter("bias_hh_l" + k, w[3]);
      }
      if (o.proj_size > 0) register_parameter("weight_hr_l" + k, w[4]);
    }
  }
}

RNNOutput RNNBase::forward_all(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in) {
  ANVIL_CHECK((input.dim() == 3 || input.dim() == 2) && input.size(-1) == input_, type_name(), "(", input_, ", ",
              hidden_, "): expected input [T, B, ", input_, "] (or [B, T, ", input_, "] with batch_first, or [T, ",
              input_, "] unbatched), got ", input.dim(), " dims with last size ", input.dim() ? input.size(-1) : 0);
  // Unbatched input runs as a batch of one (in the time-major layout whatever batch_first
  // says, as in PyTorch); its initial states must be unbatched too.
  const bool batched = input.dim() == 3;
  auto unbatch_state = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return t;
    ANVIL_CHECK(t.dim() == (batched ? 3 : 2), type_name(), ": for ", batched ? "batched 3-D" : "unbatched 2-D",
                " input, ", name, " should also be ", batched ? "3-D" : "2-D", ", got ", t.dim(), "-D");
    return batched ? t : t.unsqueeze(1);
  };
  const Tensor h0 = unbatch_state(h0_in, "h0"), c0 = unbatch_state(c0_in, "c0");
  const Tensor x = !batched ? input.unsqueeze(1) : options_.batch_first ? input.transpose(0, 1) : input;  // [T, B, F]
  const int64_t T = x.size(0), B = x.size(1), H = hidden_, L = options_.num_layers, D = num_directions();
  const int64_t R = state_size();
  const bool lstm = gates_ == 4;
  auto initial = [&](const Tensor& t, const char* name, int64_t size) {
    if (!t.defined()) return zeros({D * L, B, size}, TensorOptions(x.dtype()).with_device(x.device()));
    ANVIL_CHECK(t.dim() == 3 && t.size(0) == D * L && t.size(1) == B && t.size(2) == size, type_name(), ": expected ",
                name, " [", D * L, ", ", B, ", ", size, "] (num_directions * num_layers, batch, ",
                size == H ? "hidden" : "proj_size", "), got ", shape_str(t.sizes()));
    return t;
  };
  const Tensor h_init = initial(h0, "h0", R);
  const Tensor c_init = lstm ? initial(c0, "c0", H) : Tensor();
  Tensor layer_in = x;
  std::vector<Tensor> h_last, c_last;
  // Exported, each layer is one ONNX GRU / LSTM / RNN node (its loop hidden, so the sequence
  // length can stay symbolic); h_n is then read from the output, and c_n is not available.
  const bool exporting = exporter::capturing();
  if (exporting && options_.proj_size > 0) {
    throw exporter::CaptureError("LSTM with proj_size has no ONNX form (ONNX's LSTM has no output projection)");
  }
  if (exporting && linears_) {
    throw exporter::CaptureError(type_name() + " with int8 weights has no ONNX form here (ONNX's " + type_name() +
                                 " takes float weights); export the float model");
  }
  for (int64_t l = 0; l < L; ++l) {
    std::optional<exporter::Composite> node;
    if (exporting) {
      exporter::Attributes attrs{{"hidden_size", H}};
      if (gates_ == 3) attrs.emplace_back("linear_before_reset", int64_t{1});  // PyTorch's GRU: r * (W_hn h + b_hn)
      if (D == 2) attrs.emplace_back("direction", std::string("bidirectional"));
      if (gates_ == 1 && options_.nonlinearity == "relu")  // one activation per direction (ONNX's default: Tanh)
        attrs.emplace_back("activations", std::vector<std::string>(static_cast<size_t>(D), "Relu"));
      node.emplace(gates_ == 3 ? "GRU"
                   : lstm      ? "LSTM"
                               : "RNN",
                   OnnxRecurrentInputs(layer_in, l, h0, c0), std::move(attrs));
    }
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = l * D + d;
      Tensor h, c;
      outs.push_back(RunLayer(layer_in, LayerWeights(l, d), h_init[k], lstm ? c_init[k] : Tensor(), d == 1,
                              exporting ? nullptr : &h, exporting ? nullptr : &c));
      h_last.push_back(h);
      c_last.push_back(c);
    }
    layer_in = D == 1 ? outs[0] : cat(outs, 2);
    if (exporting) {
      layer_in = node->finish(layer_in);
      // The forward direction's final state is its output at the last step, the backward
      // one's its output at the first.
      const Tensor last_step = layer_in.select(0, T - 1);
      h_last[static_cast<size_t>(l * D)] = D == 1 ? last_step : last_step.narrow(1, 0, H);
      if (D == 2) h_last[static_cast<size_t>(l * D + 1)] = layer_in.select(0, 0).narrow(1, H, H);
      continue;
    }
    if (l + 1 < L && options_.dropout > 0) layer_in = functional::dropout(layer_in, options_.dropout, is_training());
  }
  RNNOutput out;
  out.output = !batched ? layer_in.squeeze(1) : options_.batch_first ? layer_in.transpose(0, 1) : layer_in;
  out.h_n = stack(h_last, 0);
  if (lstm && !exporting) out.c_n = stack(c_last, 0);
  if (!batched) {
    out.h_n = out.h_n.squeeze(1);
    if (out.c_n.defined()) out.c_n = out.c_n.squeeze(1);
  }
  return out;
}

namespace {
// One step of the gates: gx = W_ih x + b_ih and gh = W_hh h + b_hh, [B, G*H]; c only for the
// LSTM; returns h' and (LSTM) c', before any projection.
std::tuple<Tensor, Tensor> GateStep(int64_t gates, bool relu_rnn, const Tensor& gx, const Tensor& gh, const Tensor& h,
                                    const Tensor& c, int64_t H) {
  if (gates == 1) return {relu_rnn ? relu(gx + gh) : tanh(gx + gh), Tensor()};
  if (gates == 4) {
    const Tensor g = gx + gh;
    const Tensor i = sigmoid(g.narrow(-1, 0, H)), f = sigmoid(g.narrow(-1, H, H));
    const Tensor gg = tanh(g.narrow(-1, 2 * H, H)), o = sigmoid(g.narrow(-1, 3 * H, H));
    const Tensor c_next = f * c + i * gg;
    return {o * tanh(c_next), c_next};
  }
  const Tensor r = sigmoid(gx.narrow(-1, 0, H) + gh.narrow(-1, 0, H));
  const Tensor z = sigmoid(gx.narrow(-1, H, H) + gh.narrow(-1, H, H));
  const Tensor n = tanh(gx.narrow(-1, 2 * H, H) + r * gh.narrow(-1, 2 * H, H));
  return {(1.0 - z) * n + z * h, Tensor()};
}
}  // namespace

Tensor RNNBase::ApplyLinear(const Tensor& x, const Tensor* w, int which) const {
  if (linears_) return linears_->apply(x, (w - weights_.data()) / kWeightsPerDirection, which);
  if (which == kProjectionWeight) return linear(x, w[4]);
  return linear(x, w[which], w[which + 2]);
}

std::string RNNBase::weight_name(int64_t slot, int which) const {
  static const char* const kNames[] = {"weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l", "weight_hr_l"};
  const int64_t D = num_directions();
  return kNames[which] + std::to_string(slot / D) + (slot % D == 1 ? "_reverse" : "");
}

Tensor RNNBase::RunLayer(const Tensor& layer_in, const Tensor* w, const Tensor& h0, const Tensor& c0, bool reverse,
                         Tensor* h_out, Tensor* c_out) const {
  const int64_t T = layer_in.size(0), H = hidden_;
  const bool lstm = gates_ == 4;
  // Input projections of every step at once: [T, B, G*H].
  const Tensor gi = ApplyLinear(layer_in, w, kInputWeight);
  Tensor h = h0, c = c0;
  std::vector<Tensor> outputs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    const Tensor gh = ApplyLinear(h, w, kHiddenWeight);  // [B, G*H]
    std::tie(h, c) = GateStep(gates_, options_.nonlinearity == "relu", gi[t], gh, h, c, H);
    if (lstm && options_.proj_size > 0) h = ApplyLinear(h, w, kProjectionWeight);  // the projection to proj_size
    outputs[static_cast<size_t>(t)] = h;
  }
  if (h_out != nullptr) *h_out = h;
  if (c_out != nullptr) *c_out = c;
  return stack(outputs, 0);
}

std::vector<Tensor> RNNBase::OnnxRecurrentInputs(const Tensor& x, int64_t layer, const Tensor& h0,
                                                 const Tensor& c0) const {
  // ONNX's gate order: GRU z, r, h (Anvil's and PyTorch's r, z, n); LSTM i, o, f, c (i, f, g, o).
  const int64_t H = hidden_, D = num_directions();
  std::vector<int64_t> order{0};
  if (gates_ == 3) order = {1, 0, 2};
  if (gates_ == 4) order = {0, 3, 1, 2};
  auto reorder = [&](const Tensor& t) {
    std::vector<Tensor> parts;
    for (int64_t g : order) parts.push_back(t.narrow(0, g * H, H));
    return cat(parts, 0).unsqueeze(0);
  };
  Tensor wx, wh, bias;
  {
    exporter::detail::KernelScope constants;  // the re-laid weights are constants of the graph, not steps
    std::vector<Tensor> wxs, whs, biases;     // one row per direction, forward first
    for (int64_t d = 0; d < D; ++d) {
      const Tensor* w = LayerWeights(layer, d);
      wxs.push_back(reorder(w[0]));
      whs.push_back(reorder(w[1]));
      biases.push_back(options_.bias
                           ? cat({reorder(w[2]), reorder(w[3])}, 1)
                           : zeros({1, 2 * gates_ * H}, TensorOptions(w[0].dtype()).with_device(w[0].device())));
    }
    wx = cat(wxs, 0);
    wh = cat(whs, 0);
    bias = cat(biases, 0);
  }
  std::vector<Tensor> in{x, wx, wh, bias, Tensor(), h0.defined() ? h0.narrow(0, layer * D, D) : Tensor()};
  if (gates_ == 4) in.push_back(c0.defined() ? c0.narrow(0, layer * D, D) : Tensor());
  return in;
}

std::string RNNBase::extra_repr() const {
  return std::to_string(input_) + ", " + std::to_string(hidden_) +
         ", num_layers=" + std::to_string(options_.num_layers) + (options_.batch_first ? ", batch_first=true" : "") +
         (options_.bidirectional ? ", bidirectional=true" : "") +
         (options_.proj_size > 0 ? ", proj_size=" + std::to_string(options_.proj_size) : "");
}

RNNCellBase::RNNCellBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias,
                         std::string nonlinearity)
    : Module(type),
      gates_(gates),
      input_(input_size),
      hidden_(hidden_size),
      bias_(bias),
      nonlinearity_(std::move(nonlinearity)) {
  ANVIL_CHECK(input_size > 0 && hidden_size > 0, type, ": expected positive input_size and hidden_size, got ",
              input_size, " and ", hidden_size);
  ANVIL_CHECK(nonlinearity_ == "tanh" || nonlinearity_ == "relu", type, ": Unknown nonlinearity: ", nonlinearity_,
              " (expected 'tanh' or 'relu')");
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weight_ih = empty({gates * hidden_size, input_size});
  weight_hh = empty({gates * hidden_size, hidden_size});
  init::uniform_(weight_ih, -bound, bound);
  init::uniform_(weight_hh, -bound, bound);
  register_parameter("weight_ih", weight_ih);
  register_parameter("weight_hh", weight_hh);
  if (bias) {
    bias_ih = empty({gates * hidden_size});
    bias_hh = empty({gates * hidden_size});
    init::uniform_(bias_ih, -bound, bound);
    init::uniform_(bias_hh, -bound, bound);
    register_parameter("bias_ih", bias_ih);
    register_parameter("bias_hh", bias_hh);
  }
}

std::tuple<Tensor, Tensor> RNNCellBase::Step(const Tensor& input, const Tensor& h_in, const Tensor& c_in) const {
  const char* type = type_name().c_str();
  ANVIL_CHECK(input.dim() == 1 || input.dim() == 2, type, ": Expected input to be 1D or 2D, got ", input.dim(),
              "D instead");
  ANVIL_CHECK(input.size(-1) == input_, type, ": input has inconsistent input_size: got ", input.size(-1), " expected ",
              input_);
  const bool batched = input.dim() == 2;
  const Tensor x = batched ? input : input.unsqueeze(0);
  const int64_t B = x.size(0), H = hidden_;
  auto state = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return zeros({B, H}, TensorOptions(x.dtype()).with_device(x.device()));
    ANVIL_CHECK(t.dim() == (batched ? 2 : 1), type, ": Expected ", name, " to be ", batched ? "2D" : "1D", ", got ",
                t.dim(), "D instead");
    const Tensor s = batched ? t : t.unsqueeze(0);
    ANVIL_CHECK(s.size(0) == B && s.size(1) == H, type, ": expected ", name, " [", B, ", ", H, "], got ",
                shape_str(t.sizes()));
    return s;
  };
  const Tensor h = state(h_in, "hx"), c = gates_ == 4 ? state(c_in, "cx") : Tensor();
  const Tensor gx = linear(x, weight_ih, bias_ih), gh = linear(h, weight_hh, bias_hh);
  auto [h_next, c_next] = GateStep(gates_, nonlinearity_ == "relu", gx, gh, h, c, H);
  if (batched) return {h_next, c_next};
  return {h_next.squeeze(0), c_next.defined() ? c_next.squeeze(0) : c_next};
}

std::string RNNCellBase::extra_repr() const {
  return std::to_string(input_) + ", " + std::to_string(hidden_) + (bias_ ? "" : ", bias=false") +
         (gates_ == 1 && nonlinearity_ != "tanh" ? ", nonlinearity=" + nonlinearity_ : "");
}

}  // namespace anvil::nn
