// Normalisation and embedding, as composites of engine ops (their backward comes from the
// ops' rules).
#include "core/nn/normalization.h"

#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/export/capture.h"
#include "core/nn/init.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {
namespace functional {
namespace {

// [C] -> [1, C, 1, ...] to broadcast over input of rank `dim`.
Tensor PerChannel(const Tensor& v, int64_t dim) {
  IntArray shape(static_cast<size_t>(dim), 1);
  shape[1] = v.size(0);
  return v.reshape(shape);
}

// `t`, or (an absent affine parameter) a tensor like `like` filled with `value`: the exported
// operators take the parameter.
Tensor OrFilled(const Tensor& t, const Tensor& like, double value) {
  return t.defined() ? t : full(like.sizes(), value, TensorOptions(like.dtype()).with_device(like.device()));
}

}  // namespace

Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps) {
  ANVIL_CHECK(x.dim() >= 2, "batch_norm: expected input [N, C, ...], got ", shape_str(x.sizes()));
  const int64_t C = x.size(1);
  IntArray reduce_dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) reduce_dims.push_back(d);
  Tensor mean, var;
  if (training) {
    const int64_t count = x.numel() / C;
    ANVIL_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
                shape_str(x.sizes()), " (a batch of one sample cannot be normalised by its own statistics)");
    mean = x.mean(reduce_dims);
    var = x.var(reduce_dims, /*correction=*/0);
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
      running_mean.mul_(1.0 - momentum).add_(mean.detach(), momentum);
      running_var.mul_(1.0 - momentum).add_(var.detach() * unbias, momentum);
    }
  } else {
    ANVIL_CHECK(running_mean.defined(), "batch_norm: eval mode needs running statistics (track_running_stats)");
    mean = running_mean;
    var = running_var;
  }
  // Exported as one BatchNormalization node (inference form: the running statistics).
  std::optional<exporter::Composite> node;
  if (!training && exporter::capturing()) {
    node.emplace("BatchNormalization",
                 std::vector<Tensor>{x, OrFilled(weight, mean, 1.0), OrFilled(bias, mean, 0.0), mean, var},
                 exporter::Attributes{{"epsilon", eps}});
  }
  Tensor y = (x - PerChannel(mean, x.dim())) * PerChannel(rsqrt(var + eps), x.dim());
  if (weight.defined()) y = y * PerChannel(weight, x.dim());
  if (bias.defined()) y = y + PerChannel(bias, x.dim());
  return node ? node->finish(y) : y;
}

Tensor layer_norm(const Tensor& x, const IntArray& shape, const Tensor& weight, const Tensor& bias, double eps) {
  const auto k = static_cast<int64_t>(shape.size());
  ANVIL_CHECK(k >= 1 && x.dim() >= k, "layer_norm: normalized_shape ", shape_str(shape),
              " has more dims than the input ", shape_str(x.sizes()));
  for (int64_t i = 0; i < k; ++i) {
    ANVIL_CHECK(x.size(x.dim() - k + i) == shape[static_cast<size_t>(i)], "layer_norm: expected the input to end in ",
                shape_str(shape), ", got ", shape_str(x.sizes()));
  }
  IntArray dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) {
    const Tensor like = zeros(shape, TensorOptions(x.dtype()).with_device(x.device()));
    node.emplace("LayerNormalization", std::vector<Tensor>{x, OrFilled(weight, like, 1.0), OrFilled(bias, like, 0.0)},
                 exporter::Attributes{{"axis", -k}, {"epsilon", eps}});
  }
  const Tensor mean = x.mean(dims, /*keepdim=*/true);
  const Tensor var = x.var(dims, /*correction=*/0, /*keepdim=*/true);
  Tensor y = (x - mean) * rsqrt(var + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return node ? node->finish(y) : y;
}

Tensor group_norm(const Tensor& x, int64_t G, const Tensor& weight, const Tensor& bias, double eps) {
  ANVIL_CHECK(x.dim() >= 2, "group_norm: expected input [N, C, ...], got ", shape_str(x.sizes()));
  const int64_t N = x.size(0), C = x.size(1);
  ANVIL_CHECK(G >= 1 && C % G == 0, "group_norm: num_groups = ", G, " must divide the ", C, " channels");
  const Tensor g = x.reshape({N, G, -1});
  const Tensor mean = g.mean({2}, true);
  const Tensor var = g.var({2}, 0, true);
  Tensor y = ((g - mean) * rsqrt(var + eps)).reshape(x.sizes());
  if (weight.defined()) y = y * PerChannel(weight, x.dim());
  if (bias.defined()) y = y + PerChannel(bias, x.dim());
  return y;
}

namespace {

void CheckEmbeddingArgs(const Tensor& indices, const Tensor& weight, const char* who) {
  ANVIL_CHECK_TYPE(indices.dtype() == kInt64 || indices.dtype() == kInt32, who, ": expected integer indices, got ",
                   indices.dtype());
  ANVIL_CHECK(weight.dim() == 2, who, ": expected weight [num_embeddings, dim], got ", shape_str(weight.sizes()));
}

// The indices as int64 [n], checked against the table's rows. CPU indices are read where they
// lie, as a kernel would read them: no host read (Tensor::item) per step, which the doctor's
// HOST_SYNC_PER_STEP would rightly count. Elsewhere the range comes back to the host (one wait
// per forward on a GPU).
Tensor FlatIndices(const Tensor& indices, const Tensor& weight, const char* who) {
  const Tensor flat = indices.reshape({-1}).to(kInt64).contiguous();
  if (flat.numel() > 0) {
    int64_t lo = 0, hi = 0;
    if (flat.is_cpu()) {
      const int64_t* p = flat.data_ptr<int64_t>();
      const auto [min_it, max_it] = std::minmax_element(p, p + flat.numel());
      lo = *min_it;
      hi = *max_it;
    } else {
      lo = flat.min().item<int64_t>();
      hi = flat.max().item<int64_t>();
    }
    ANVIL_CHECK_INDEX(lo >= 0 && hi < weight.size(0), who, ": index ", lo < 0 ? lo : hi, " is out of range for ",
                      weight.size(0), " embeddings");
  }
  return flat;
}

}  // namespace

Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  CheckEmbeddingArgs(indices, weight, "embedding_renorm_");
  const Tensor flat = FlatIndices(indices, weight, "embedding_renorm_");
  if (flat.numel() == 0) return weight;
  NoGradGuard no_grad;
  // Each distinct row once: its norm, and the scale max_norm / (norm + 1e-7) where the norm
  // exceeds max_norm (PyTorch computes the norm in the weight's dtype, the scale in double,
  // and multiplies the row in its dtype).
  const Tensor rows = std::get<0>(sort(flat));
  const Tensor distinct =
      masked_select(rows, cat({ones({1}, TensorOptions(kBool).with_device(rows.device())),
                               rows.narrow(0, 1, rows.numel() - 1) != rows.narrow(0, 0, rows.numel() - 1)}));
  const Tensor picked = index_select(weight, 0, distinct);
  const Tensor norms = norm(picked, norm_type, {1}, /*keepdim=*/true).to(kFloat64);
  const Tensor scale = where(norms > max_norm, max_norm / (norms + 1e-7), ones_like(norms));
  weight.index_put_({distinct}, picked * scale.to(weight.dtype()));
  return weight;
}

int64_t resolve_padding_idx(std::optional<int64_t> padding_idx, int64_t num_embeddings) {
  if (!padding_idx) return -1;
  ANVIL_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings,
              "Padding_idx must be within num_embeddings: expected it in [", -num_embeddings, ", ", num_embeddings,
              "), got ", *padding_idx);
  return *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx_arg,
                 std::optional<double> max_norm, double norm_type) {
  CheckEmbeddingArgs(indices, weight, "embedding");
  const int64_t padding_idx = resolve_padding_idx(padding_idx_arg, weight.size(0));
  std::optional<exporter::Composite> node;  // exported as Gather(weight, indices)
  if (exporter::capturing()) {
    if (max_norm) {
      throw exporter::CaptureError(
          "embedding with max_norm renormalises its weight in place while it runs; an exported Gather cannot do "
          "that (renormalise the weight once with embedding_renorm_ over every index, then export without max_norm)");
    }
    node.emplace("Gather", std::vector<Tensor>{weight, indices}, exporter::Attributes{{"axis", int64_t{0}}});
  }
  const Tensor flat = FlatIndices(indices, weight, "embedding");
  if (max_norm) {
    Tensor w = weight;
    embedding_renorm_(w, flat, *max_norm, norm_type);
  }
  Tensor rows = index_select(weight, 0, flat);
  if (padding_idx >= 0) {
    // Rows looked up at padding_idx pass their value but not their gradient.
    const Tensor pad_rows = (flat == padding_idx).unsqueeze(1);
    rows = where(pad_rows, rows.detach(), rows);
  }
  IntArray out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  const Tensor out = rows.reshape(out_shape);
  return node ? node->finish(out) : out;
}

}  // namespace functional

// ---- modules ----

BatchNorm::BatchNorm(const char* type, int64_t num_features, int64_t a, int64_t b, double eps,
                     std::optional<double> momentum, bool affine, bool track_running_stats)
    : Module(type), num_features(num_features), dims_a_(a), dims_b_(b), eps_(eps), momentum_(momentum) {
  ANVIL_CHECK(num_features > 0, type, ": expected a positive number of features, got ", num_features);
  if (affine) {
    weight = ones({num_features});
    bias = zeros({num_features});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (track_running_stats) {
    running_mean = zeros({num_features});
    running_var = ones({num_features});
    num_batches_tracked = zeros({}, kInt64);
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  ANVIL_CHECK(x.dim() == dims_a_ || x.dim() == dims_b_, type_name(), ": expected ", dims_a_,
              dims_a_ == dims_b_ ? "" : " or " + std::to_string(dims_b_), "-dim input, got ", x.dim(), " dims");
  ANVIL_CHECK(x.size(1) == num_features, type_name(), "(", num_features, "): expected ", num_features,
              " channels on dim 1, got ", x.size(1));
  const bool use_batch_stats = is_training() || !running_mean.defined();
  double factor = momentum_.value_or(0.0);
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    // momentum=None: a cumulative average, this batch weighted by 1 / (batches so far).
    if (!momentum_) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  // Without running statistics, eval mode normalises with the batch's own (as PyTorch does).
  return functional::batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, factor, eps_);
}

std::string BatchNorm::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + (momentum_ ? std::to_string(*momentum_) : std::string("None"));
}

LayerNorm::LayerNorm(IntArray normalized_shape, double eps, bool affine)
    : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight = ones(shape_);
    bias = zeros(shape_);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return functional::layer_norm(x, shape_, weight, bias, eps_); }

std::string LayerNorm::extra_repr() const {
  std::string s = "(";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "), eps=" + std::to_string(eps_);
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : Module("GroupNorm"), groups_(num_groups), channels_(num_channels), eps_(eps) {
  ANVIL_CHECK(num_groups >= 1 && num_channels % num_groups == 0, "GroupNorm: num_groups = ", num_groups,
              " must divide num_channels = ", num_channels);
  if (affine) {
    weight = ones({num_channels});
    bias = zeros({num_channels});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Tensor GroupNorm::forward(const Tensor& x) { return functional::group_norm(x, groups_, weight, bias, eps_); }

std::string GroupNorm::extra_repr() const {
  return std::to_string(groups_) + ", " + std::to_string(channels_) + ", eps=" + std::to_string(eps_);
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx, std::optional<double> max_norm,
                     double norm_type)
    : Module("Embedding"), max_norm_(max_norm), norm_type_(norm_type) {
  ANVIL_CHECK(num > 0 && dim > 0, "Embedding: expected positive sizes, got ", num, " x ", dim);
  padding_idx_ = functional::resolve_padding_idx(padding_idx, num);
  weight = empty({num, dim});
  init::normal_(weight);
  if (padding_idx_ >= 0) {
    NoGradGuard no_grad;
    weight.select(0, padding_idx_).zero_();
  }
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  return functional::embedding(indices, weight, padding_idx_ >= 0 ? std::optional<int64_t>(padding_idx_) : std::nullopt,
                               max_norm_, norm_type_);
}

std::string Embedding::extra_repr() const {
  return std::to_string(weight.size(0)) + ", " + std::to_string(weight.size(1)) +
         (padding_idx_ >= 0 ? ", padding_idx=" + std::to_string(padding_idx_) : "") +
         (max_norm_ ? ", max_norm=" + std::to_string(*max_norm_) : "") +
         (max_norm_ && norm_type_ != 2.0 ? ", norm_type=" + std::to_string(norm_type_) : "");
}

}  // namespace anvil::nn
