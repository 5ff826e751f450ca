// Multi-head attention and the Transformer encoder layer: see transformer.h.
#include "core/nn/transformer.h"

#include <cmath>

#include "core/nn/functional.h"
#include "core/nn/init.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool batch_first)
    : Module("MultiheadAttention"), embed_(embed_dim), heads_(num_heads), dropout_(dropout), batch_first_(batch_first) {
  ANVIL_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "MultiheadAttention: embed_dim (",
              embed_dim, ") must be a positive multiple of num_heads (", num_heads, ")");
  in_proj_weight = empty({3 * embed_dim, embed_dim});
  init::xavier_uniform_(in_proj_weight);
  in_proj_bias = zeros({3 * embed_dim});
  register_parameter("in_proj_weight", in_proj_weight);
  register_parameter("in_proj_bias", in_proj_bias);
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim));
  init::zeros_(out_proj->bias);
}

namespace {

// A mask as PyTorch's _canonical_mask makes it: bool becomes -inf where true and 0 elsewhere,
// float is kept (as an additive mask).
Tensor AdditiveMask(const Tensor& mask, ScalarType dtype, const char* name) {
  ANVIL_CHECK_TYPE(mask.dtype() == kBool || is_floating_point(mask.dtype()),
                   "MultiheadAttention: only bool and "
                   "floating types of ",
                   name, " are supported, got ", mask.dtype());
  if (mask.dtype() != kBool) return mask;
  return where(mask, -INFINITY, zeros({}, TensorOptions(dtype).with_device(mask.device())));
}

}  // namespace

Tensor MultiheadAttention::ScoreBias(const Tensor& key_padding_mask, const Tensor& attn_mask, ScalarType dtype,
                                     int64_t B, int64_t L, int64_t S) const {
  Tensor bias;
  if (attn_mask.defined()) {
    ANVIL_CHECK_TYPE(attn_mask.dtype() == kBool || attn_mask.dtype() == dtype,
                     "MultiheadAttention: expected a "
                     "bool attn_mask or one of the query's dtype ",
                     dtype, ", got ", attn_mask.dtype());
    if (attn_mask.dim() == 2) {
      ANVIL_CHECK(attn_mask.size(0) == L && attn_mask.size(1) == S, "MultiheadAttention: the 2-D attn_mask is ",
                  shape_str(attn_mask.sizes()), ", expected [", L, ", ", S, "]");
      bias = AdditiveMask(attn_mask, dtype, "attn_mask").view({1, 1, L, S});
    } else {
      ANVIL_CHECK(attn_mask.dim() == 3, "MultiheadAttention: expected a 2-D or 3-D attn_mask, got ", attn_mask.dim(),
                  " dims");
      ANVIL_CHECK(attn_mask.size(0) == B * heads_ && attn_mask.size(1) == L && attn_mask.size(2) == S,
                  "MultiheadAttention: the 3-D attn_mask is ", shape_str(attn_mask.sizes()), ", expected [", B * heads_,
                  ", ", L, ", ", S, "] (batch * heads, L, S)");
      bias = AdditiveMask(attn_mask, dtype, "attn_mask").view({B, heads_, L, S});
    }
  }
  if (key_padding_mask.defined()) {
    ANVIL_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == B && key_padding_mask.size(1) == S,
                "MultiheadAttention: expected key_padding_mask [", B, ", ", S, "], got ",
                shape_str(key_padding_mask.sizes()));
    const Tensor kpm = AdditiveMask(key_padding_mask, dtype, "key_padding_mask").view({B, 1, 1, S});
    bias = bias.defined() ? bias + kpm : kpm;
  }
  return bias;
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const Tensor& key_padding_mask, bool need_weights,
                                                       const Tensor& attn_mask, bool average_attn_weights) {
  if (query.dim() == 2) {
    // Unbatched, as PyTorch: query [L, E], key and value [S, E], key_padding_mask [S],
    // attn_mask [L, S] or [heads, L, S]; run as a batch of one and drop its dim again.
    ANVIL_CHECK(key.dim() == 2 && value.dim() == 2, "MultiheadAttention(", embed_,
                "): for unbatched (2-D) query, expected key and value to be 2-D, got ", key.dim(), "-D and ",
                value.dim(), "-D");
    ANVIL_CHECK(!key_padding_mask.defined() || key_padding_mask.dim() == 1, "MultiheadAttention(", embed_,
                "): for unbatched (2-D) query, expected key_padding_mask to be undefined or 1-D, got ",
                key_padding_mask.dim(), "-D");
    const int64_t b = batch_first_ ? 0 : 1;
    auto [out, weights] = forward(query.unsqueeze(b), key.unsqueeze(b), value.unsqueeze(b),
                                  key_padding_mask.defined() ? key_padding_mask.unsqueeze(0) : Tensor(), need_weights,
                                  attn_mask, average_attn_weights);
    return {out.squeeze(b), weights.defined() ? weights.squeeze(0) : weights};
  }
  ANVIL_CHECK(query.dim() == 3 && query.size(2) == embed_, "MultiheadAttention(", embed_, "): expected query [L, B, ",
              embed_, "] (or [B, L, ", embed_, "] with batch_first), got ", shape_str(query.sizes()));
  ANVIL_CHECK(key.dim() == 3 && key.sizes() == value.sizes() && key.size(2) == embed_ &&
                  key.size(batch_first_ ? 0 : 1) == query.size(batch_first_ ? 0 : 1),
              "MultiheadAttention(", embed_, "): expected key and value of one shape [S, B, ", embed_,
              "] (batch first with batch_first) for query ", shape_str(query.sizes()), ", got ", shape_str(key.sizes()),
              " and ", shape_str(value.sizes()));
  // Work in [B, L, E].
  const Tensor q_in = batch_first_ ? query : query.transpose(0, 1);
  const Tensor k_in = batch_first_ ? key : key.transpose(0, 1);
  const Tensor v_in = batch_first_ ? value : value.transpose(0, 1);
  const int64_t B = q_in.size(0), L = q_in.size(1), S = k_in.size(1), E = embed_, Hh = heads_, D = E / Hh;
  const Tensor bias = ScoreBias(key_padding_mask, attn_mask, query.dtype(), B, L, S);
  auto project = [&](const Tensor& x, int64_t part) {
    return linear(x, in_proj_weight.narrow(0, part * E, E), in_proj_bias.narrow(0, part * E, E));
  };
  // [B, L, E] -> [B, heads, L, D]
  auto split = [&](const Tensor& x, int64_t len) { return x.reshape({B, len, Hh, D}).transpose(1, 2); };
  const Tensor q = split(project(q_in, 0), L), k = split(project(k_in, 1), S), v = split(project(v_in, 2), S);
  Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));  // [B, h, L, S]
  if (bias.defined()) scores = scores + bias;
  Tensor attn;
  if (need_weights || !bias.defined()) {
    attn = softmax(scores, -1);
  } else {
    // A query with every key masked attends to nothing: zeros, where a softmax over only -inf
    // would be NaN (forward and backward). Without a mask no query is in that case.
    const Tensor none_allowed = amax(scores.detach(), {-1}, /*keepdim=*/true) == -INFINITY;
    attn = masked_fill(softmax(masked_fill(scores, none_allowed, 0.0), -1), none_allowed, 0.0);
  }
  attn = functional::dropout(attn, dropout_, is_training());
  const Tensor ctx = matmul(attn, v).transpose(1, 2).reshape({B, L, E});
  Tensor out = out_proj->forward(ctx);
  if (!batch_first_) out = out.transpose(0, 1);
  if (!need_weights) return {out, Tensor()};
  return {out, average_attn_weights ? attn.mean({1}) : attn};
}

Tensor MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& key_padding_mask, const Tensor& attn_mask) {
  return std::get<0>(forward(query, key, value, key_padding_mask, /*need_weights=*/false, attn_mask));
}

std::string MultiheadAttention::extra_repr() const {
  return "embed_dim=" + std::to_string(embed_) + ", num_heads=" + std::to_string(heads_);
}

namespace {

// The layers' blocks, each ending in its dropout: attention of `query` to `memory` (itself for
// self-attention), and the feed-forward block linear2(dropout(activation(linear1(x)))).
Tensor AttentionBlock(MultiheadAttention& attn, const Tensor& query, const Tensor& memory,
                      const Tensor& key_padding_mask, const Tensor& mask, double p, bool train) {
  return functional::dropout(attn.attend(query, memory, memory, key_padding_mask, mask), p, train);
}

Tensor FeedForwardBlock(Linear& linear1, Linear& linear2, bool gelu_activation, const Tensor& x, double p, bool train) {
  const Tensor hidden = gelu_activation ? gelu(linear1.forward(x)) : relu(linear1.forward(x));
  return functional::dropout(linear2.forward(functional::dropout(hidden, p, train)), p, train);
}

std::string LayerRepr(const TransformerEncoderOptions& o) {
  return "dim_feedforward=" + std::to_string(o.dim_feedforward) + ", dropout=" + std::to_string(o.dropout) +
         (o.norm_first ? ", norm_first=true" : "");
}

// The one-argument forward of the decoder layer and stack, which Module requires: a decoder
// needs the encoder's memory as well.
[[noreturn]] void ThrowNeedsMemory(const char* who) {
  throw Error(std::string(who) + ": forward needs tgt and memory: forward(tgt, memory, ...)");
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderOptions& o)
    : Module("TransformerEncoderLayer"), options_(o) {
  self_attn =
      register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, o.dropout, o.batch_first));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, o.dim_feedforward));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(IntArray{d_model}));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(IntArray{d_model}));
}

Tensor TransformerEncoderLayer::encode(const Tensor& x, const Tensor& key_padding_mask) {
  return forward(x, Tensor(), key_padding_mask);
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& src_mask, const Tensor& key_padding_mask) {
  const double p = options_.dropout;
  const bool train = is_training();
  auto sa = [&](const Tensor& t) { return AttentionBlock(*self_attn, t, t, key_padding_mask, src_mask, p, train); };
  auto ff = [&](const Tensor& t) { return FeedForwardBlock(*linear1, *linear2, options_.gelu, t, p, train); };
  if (options_.norm_first) {
    const Tensor y = x + sa(norm1->forward(x));
    return y + ff(norm2->forward(y));
  }
  const Tensor y = norm1->forward(x + sa(x));
  return norm2->forward(y + ff(y));
}

std::string TransformerEncoderLayer::extra_repr() const { return LayerRepr(options_); }

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderOptions& o)
    : Module("TransformerDecoderLayer"), options_(o) {
  self_attn =
      register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, o.dropout, o.batch_first));
  multihead_attn =
      register_module("multihead_attn", std::make_shared<MultiheadAttention>(d_model, nhead, o.dropout, o.batch_first));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, o.dim_feedforward));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(IntArray{d_model}));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(IntArray{d_model}));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(IntArray{d_model}));
}

Tensor TransformerDecoderLayer::forward(const Tensor&) { ThrowNeedsMemory("TransformerDecoderLayer"); }

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask) {
  ANVIL_CHECK(memory.defined(), "TransformerDecoderLayer: memory is undefined");
  const double p = options_.dropout;
  const bool train = is_training();
  auto sa = [&](const Tensor& t) { return AttentionBlock(*self_attn, t, t, tgt_key_padding_mask, tgt_mask, p, train); };
  auto mha = [&](const Tensor& t) {
    return AttentionBlock(*multihead_attn, t, memory, memory_key_padding_mask, memory_mask, p, train);
  };
  auto ff = [&](const Tensor& t) { return FeedForwardBlock(*linear1, *linear2, options_.gelu, t, p, train); };
  if (options_.norm_first) {
    Tensor x = tgt + sa(norm1->forward(tgt));
    x = x + mha(norm2->forward(x));
    return x + ff(norm3->forward(x));
  }
  Tensor x = norm1->forward(tgt + sa(tgt));
  x = norm2->forward(x + mha(x));
  return norm3->forward(x + ff(x));
}

std::string TransformerDecoderLayer::extra_repr() const { return LayerRepr(options_); }

namespace {
// The stacks' shared parts: num_layers fresh layers in a ModuleList and the optional norm.
template <typename Layer>
std::shared_ptr<ModuleList> StackOf(int64_t d_model, int64_t nhead, int64_t num_layers,
                                    const TransformerEncoderOptions& o, const char* who) {
  ANVIL_CHECK(num_layers >= 1, who, ": expected num_layers >= 1, got ", num_layers);
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < num_layers; ++i) list->push_back(std::make_shared<Layer>(d_model, nhead, o));
  return list;
}
}  // namespace

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       const TransformerEncoderOptions& o, bool final_norm)
    : Module("TransformerEncoder") {
  layers =
      register_module("layers", StackOf<TransformerEncoderLayer>(d_model, nhead, num_layers, o, "TransformerEncoder"));
  if (final_norm) norm = register_module("norm", std::make_shared<LayerNorm>(IntArray{d_model}));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (const auto& layer : *layers) {
    x = std::static_pointer_cast<TransformerEncoderLayer>(layer)->forward(x, mask, src_key_padding_mask);
  }
  return norm ? norm->forward(x) : x;
}

TransformerDecoder::TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       const TransformerEncoderOptions& o, bool final_norm)
    : Module("TransformerDecoder") {
  layers =
      register_module("layers", StackOf<TransformerDecoderLayer>(d_model, nhead, num_layers, o, "TransformerDecoder"));
  if (final_norm) norm = register_module("norm", std::make_shared<LayerNorm>(IntArray{d_model}));
}

Tensor TransformerDecoder::forward(const Tensor&) { ThrowNeedsMemory("TransformerDecoder"); }

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask) {
  Tensor x = tgt;
  for (const auto& layer : *layers) {
    x = std::static_pointer_cast<TransformerDecoderLayer>(layer)->forward(
        x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
  }
  return norm ? norm->forward(x) : x;
}

}  // namespace anvil::nn
