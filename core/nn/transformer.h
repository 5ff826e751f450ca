// Multi-head attention, the Transformer encoder and decoder layers and their stacks, after
// torch.nn (post-norm by default, ReLU feed-forward, dropout 0.1, batch_first option).
// Thread-safety: as every module (module.h).
#pragma once

#include <memory>
#include <tuple>

#include "core/nn/container.h"
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
  // PyTorch's forward: query [L, B, E], key and value [S, B, E] (batch first with batch_first).
  //   key_padding_mask [B, S]: bool (true = the key is padding, ignored) or float (added to
  //     every query's scores for that key);
  //   attn_mask [L, S] (every batch and head) or [B * heads, L, S]: bool (true = not allowed)
  //     or float of query's dtype (added to the scores);
  //   need_weights: also return the attention weights, [B, L, S] averaged over the heads
  //     (average_attn_weights) or [B, heads, L, S]; undefined when false.
  // Unbatched: query [L, E], key and value [S, E], key_padding_mask [S], attn_mask [L, S] or
  // [heads, L, S]; the output [L, E] and weights without the batch dim.
  // A query whose every key is masked: with need_weights its weights and output are NaN (a
  // softmax over only -inf, as PyTorch's weights path); without, zeros (as PyTorch's
  // scaled_dot_product_attention path).
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                     const Tensor& attn_mask = Tensor(), bool average_attn_weights = true);
  // The attended values only (need_weights = false), shaped like query.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = Tensor(),
                const Tensor& attn_mask = Tensor());
  Tensor forward(const Tensor& x) override { return attend(x, x, x); }
  std::string extra_repr() const override;

  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  // The additive mask [B or 1, heads or 1, L, S] both masks make (undefined without either).
  Tensor ScoreBias(const Tensor& key_padding_mask, const Tensor& attn_mask, ScalarType dtype, int64_t B, int64_t L,
                   int64_t S) const;

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
  // PyTorch's forward(src, src_mask, src_key_padding_mask): src_mask is self-attention's
  // attn_mask ([S, S] or [B * heads, S, S], bool or float).
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor());
  std::string extra_repr() const override;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  TransformerEncoderOptions options_;
};

// PyTorch's TransformerDecoderLayer: self-attention over tgt (tgt_mask, tgt_key_padding_mask),
// attention to memory (memory_mask, memory_key_padding_mask), then the feed-forward block;
// each with dropout and a residual, LayerNorm after (or before, norm_first). Parameters
// self_attn.*, multihead_attn.*, linear1, linear2, norm1..3, as PyTorch names them.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderOptions& options = {});
  // One input alone is refused: the decoder needs memory.
  Tensor forward(const Tensor& tgt) override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());
  std::string extra_repr() const override;

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  TransformerEncoderOptions options_;
};

// num_layers encoder layers (layers.0, layers.1, ...) and an optional final LayerNorm (norm),
// PyTorch's TransformerEncoder. Each layer is built afresh (PyTorch deep-copies one layer, so
// its layers start equal; a loaded state dict makes the two the same).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, const TransformerEncoderOptions& options = {},
                     bool final_norm = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = Tensor());

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

// num_layers decoder layers and an optional final LayerNorm, PyTorch's TransformerDecoder.
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers, const TransformerEncoderOptions& options = {},
                     bool final_norm = false);
  Tensor forward(const Tensor& tgt) override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

}  // namespace anvil::nn
