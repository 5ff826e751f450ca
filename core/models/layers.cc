// Spec helper modules: see layers.h.
#include "core/models/layers.h"

#include "core/nn/init.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::models {

Residual::Residual(std::shared_ptr<nn::Module> body, std::shared_ptr<nn::Module> shortcut)
    : Module("Residual"), body_(std::move(body)), shortcut_(std::move(shortcut)) {
  register_module("body", body_);
  if (shortcut_) register_module("shortcut", shortcut_);
}

Tensor Residual::forward(const Tensor& x) { return body_->forward(x) + (shortcut_ ? shortcut_->forward(x) : x); }

SequenceEncoder::SequenceEncoder(std::shared_ptr<nn::RNNBase> rnn, bool last_only)
    : Module("SequenceEncoder"), rnn_(std::move(rnn)), last_only_(last_only) {
  register_module("rnn", rnn_);
}

Tensor SequenceEncoder::forward(const Tensor& x) {
  if (last_only_ && rnn_->bidirectional()) {
    const Tensor h_n = rnn_->forward_all(x).h_n;  // [2 * num_layers, B, H]: the last layer's two are the last two
    const int64_t n = h_n.size(0);
    return cat({h_n[n - 2], h_n[n - 1]}, 1);
  }
  const Tensor out = rnn_->forward(x);  // [B, T, D*H] (batch_first)
  return last_only_ ? out.select(1, out.size(1) - 1) : out;
}

LearnedPositions::LearnedPositions(int64_t length, int64_t dim) : Module("LearnedPositions") {
  weight = empty({length, dim});
  nn::init::normal_(weight, 0.0, 0.02);
  register_parameter("weight", weight);
}

Tensor LearnedPositions::forward(const Tensor& x) {
  ANVIL_CHECK(x.dim() == 3 && x.size(1) <= weight.size(0) && x.size(2) == weight.size(1),
              "LearnedPositions: expected "
              "[B, T <= ",
              weight.size(0), ", ", weight.size(1), "] input");
  return x + weight.narrow(0, 0, x.size(1));
}

}  // namespace anvil::models
