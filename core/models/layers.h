// Small modules the model specs need besides the nn layers: residual blocks, the last step of
// a sequence model, mean pooling, learned positions.
// Thread-safety: as every module (core/nn/module.h).
#pragma once

#include <memory>

#include "core/nn/module.h"
#include "core/nn/rnn.h"

namespace anvil::models {

// y = body(x) + shortcut(x); shortcut is the identity when null.
class Residual : public nn::Module {
 public:
  Residual(std::shared_ptr<nn::Module> body, std::shared_ptr<nn::Module> shortcut);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Module> body_, shortcut_;
};

// A batch-first GRU/LSTM returning its last step [B, H] (or the whole sequence [B, T, D*H]).
// Bidirectional, "the last step" is each direction's final state, [forward, backward] (the
// backward direction ends at the first step): [B, 2*H].
class SequenceEncoder : public nn::Module {
 public:
  SequenceEncoder(std::shared_ptr<nn::RNNBase> rnn, bool last_only);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<nn::RNNBase> rnn_;
  bool last_only_;
};

// Mean over dim `dim` (counting the batch dim).
class MeanPool : public nn::Module {
 public:
  explicit MeanPool(int64_t dim) : Module("MeanPool"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return x.mean({dim_}); }

 private:
  int64_t dim_;
};

// Adds a learned position table [T, E] (N(0, 0.02)) to [B, T, E] inputs.
class LearnedPositions : public nn::Module {
 public:
  LearnedPositions(int64_t length, int64_t dim);
  Tensor forward(const Tensor& x) override;
  Tensor weight;
};

}  // namespace anvil::models
