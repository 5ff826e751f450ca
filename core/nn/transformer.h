// Multi-head attention and the Transformer encoder layer, after torch.nn (post-norm by
// default, ReLU feed-forward, dropout 0.1, batch_first option).
#pragma once

#include <memory>

#include "core/nn/linear.h"
#include "core/nn/module.h"
#include "core/nn/normalization.h"

namespace anvil::nn {

// MultiheadAttention(embed_dim, num_heads): in_proj_weight [3E, E], in_proj_bias [3E]
// (xavier-uniform / zeros, like PyTorch) and out_proj Linear(E, E). Inputs [T, B, E] or
// [B, T, E] with batch_first.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool batch_first = false);
  // key_padding_mask: bool [B, S], true where the key is padding (ignored by attention).
  // Returns the attended values, shaped like query.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = Tensor());
  Tensor forward(const Tensor& x) override { return attend(x, x, x); }
  std::string extra_repr() const override;

  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  int64_t embed_, heads_;
  double dropout_;
  bool batch_first_;
};

struct TransformerEncoderOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm when true
  bool gelu = false;        // activation: ReLU (default) or GELU
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderOptions& options = {});
  Tensor forward(const Tensor& x) override { return encode(x); }
  Tensor encode(const Tensor& x, const Tensor& key_padding_mask = Tensor());
  std::string extra_repr() const override;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  TransformerEncoderOptions options_;
};

}  // namespace anvil::nn
