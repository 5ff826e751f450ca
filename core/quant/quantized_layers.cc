#include "core/quant/quantized_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/amp/autocast.h"
#include "core/autograd/grad_mode.h"
#include "core/export/capture.h"
#include "core/nn/functional.h"
#include "core/ops/functions.h"
#include "core/quant/choose_qparams.h"
#include "core/quant/observer.h"
#include "core/quant/qtensor_kernels.h"
#include "core/quant/requantize.h"
#include "core/quant/serialize.h"
#include "core/util/error.h"
#include "core/util/thread_pool.h"

#ifndef ANVIL_WITH_CUDA
#define ANVIL_WITH_CUDA 0
#endif
#if ANVIL_WITH_CUDA
#include "core/backend/cuda/int8_linear.h"
#endif

namespace anvil::quant {
namespace {

using Json = nlohmann::ordered_json;

// The weights' integers as [n, k] rows (axis 0 first), packed for this CPU's kernel.
cpu::PackedInt8Weight PackRows(const Tensor& int8_rows) {
  const Tensor w = int8_rows.contiguous();
  const int64_t n = w.size(0);
  const int64_t k = w.numel() / std::max<int64_t>(n, 1);
  return cpu::pack_int8_weight(w.data_ptr<int8_t>(), n, k, k);
}

std::vector<float> FloatScales(const QTensor& w) {
  const std::vector<double> s = w.scales.to_vector<double>();
  std::vector<float> out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = static_cast<float>(s[i]);
  return out;
}

Tensor CheckedBias(Tensor bias, int64_t out, const char* layer) {
  if (!bias.defined()) return bias;
  ANVIL_CHECK(bias.dim() == 1 && bias.size(0) == out, layer, ": expected a bias of ", out, " values, got ",
              shape_str(bias.sizes()));
  return bias.detach().cpu().to(kFloat32).contiguous();
}

void CheckActivation(const ActivationQParams& q, const char* layer, const char* which) {
  ANVIL_CHECK(std::isfinite(q.scale) && q.scale > 0, layer, ": the ", which, " scale must be positive and finite, got ",
              q.scale);
  ANVIL_CHECK(q.zero_point >= 0 && q.zero_point <= 255, layer, ": the ", which,
              " zero point must be in 0..255 (quint8), got ", q.zero_point);
}

// Whether a product of m rows and n columns is split over the pool by rows (PipelinedRows):
// when every thread gets a few, or the columns are too few to share out.
bool SplitByRows(int64_t m, int64_t n) { return m >= 4 * get_num_threads() || n < 64; }

// acc [m, n] = a [m, k] x W^T for a batch too small to split by rows: over the pool by blocks
// of 16 columns, so a batch of one still uses every thread.
void GemmSplitByColumns(int64_t m, const uint8_t* a, const cpu::PackedInt8Weight& w, int32_t* acc) {
  const int64_t k = w.k(), n = w.n();
  const int64_t blocks = (n + 15) / 16;
  const int64_t block_grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, m * k * 16));
  parallel_for(0, blocks, block_grain,
               [&](int64_t b, int64_t e) { cpu::int8_gemm_columns(m, a, k, w, b * 16, std::min(n, e * 16), acc, n); });
}

Tensor FloatInput(const Tensor& x, const char* layer) {
  ANVIL_CHECK_TYPE(x.defined() && is_floating_point(x.dtype()), layer, ": expected a floating-point input, got ",
                   x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  return x.detach().to(kFloat32).contiguous();
}

Json ActivationJson(const ActivationQParams& q) { return Json{{"scale", q.scale}, {"zero_point", q.zero_point}}; }

// A forward's scratch memory, left uninitialised: every element is written before it is read.
template <typename T>
T* Scratch(std::unique_ptr<T[]>& holder, int64_t count) {
  holder.reset(new T[static_cast<size_t>(count)]);
  return holder.get();
}

// The element-wise passes around the GEMM run on the pool in blocks of this many elements:
// large enough that a block's work outweighs handing it to a thread. Every element is computed
// alone, so the split changes no result.
constexpr int64_t kElementGrain = int64_t{1} << 15;

// fbgemm::FindMinMax over a batch (an empty one reads as [0, 0]): lo = min(lo, x[i]) from lo =
// x[0], which keeps the first of equal values (-0 or +0) and skips NaN after the first element.
// Blocks run on the pool and fold in order with the same rule; each starts from +-infinity
// rather than its first element, so that a block beginning with NaN skips it as the single
// loop does. The result is the single loop's.
std::pair<float, float> BatchRange(const float* x, int64_t count) {
  if (count <= 0) return {0.0f, 0.0f};
  const int64_t blocks = (count + kElementGrain - 1) / kElementGrain;
  std::vector<float> los(static_cast<size_t>(blocks)), his(static_cast<size_t>(blocks));
  parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int64_t i = blk * kElementGrain; i < std::min(count, (blk + 1) * kElementGrain); ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
      los[static_cast<size_t>(blk)] = lo;
      his[static_cast<size_t>(blk)] = hi;
    }
  });
  float lo = x[0], hi = x[0];
  for (int64_t blk = 0; blk < blocks; ++blk) {
    lo = std::min(lo, los[static_cast<size_t>(blk)]);
    hi = std::max(hi, his[static_cast<size_t>(blk)]);
  }
  return {lo, hi};
}

// The three passes of an int8 layer's forward, block by block: quantize the input's rows (a
// Linear's, or a convolution's im2row of its output pixels), multiply, and finish (requantize
// into the output's rows). Each thread takes a contiguous share of the rows and walks it in
// blocks of at most int8_gemm_rows_per_block rows, so a block's bytes and int32 sums are still
// in L2 when the next pass reads them; pass after pass over the whole batch streamed each
// through memory (at batch 256 x 1024 the sums alone are 1 MiB), while W is streamed once per
// block either way. A batch too small for a share per
// thread splits the product by columns instead, the two other passes then running on the
// caller over its few rows. Every element is computed alone, so the blocking changes no bit.
//   quantize(i0, rows, a): rows [i0, i0 + rows) of the input into a (row stride k);
//   finish(i0, rows, acc): their sums (row stride n) into the output's rows.
template <class Quantize, class Finish>
void PipelinedRows(int64_t m, const cpu::PackedInt8Weight& w, const Quantize& quantize, const Finish& finish) {
  const int64_t k = w.k(), n = w.n();
  if (m <= 0) return;
  if (!SplitByRows(m, n)) {
    std::unique_ptr<uint8_t[]> a_holder;
    std::unique_ptr<int32_t[]> acc_holder;
    uint8_t* a = Scratch(a_holder, m * k);
    quantize(int64_t{0}, m, a);
    int32_t* acc = Scratch(acc_holder, m * n);
    GemmSplitByColumns(m, a, w, acc);
    finish(int64_t{0}, m, acc);
    return;
  }
  const int64_t most = cpu::int8_gemm_rows_per_block(w);
  // A thread's share is at least 2^21 units of work (about 10 us): handing a share to the pool
  // costs a few microseconds, and the int8 kernels do 2^21 products in 5-10. The kernels
  // multiply whole panels (k padded to 64, columns to 32), and the passes around the product
  // cost about as much per element as 16 products (the kernels do 64 per instruction), so a
  // convolution's small product still splits when its pixels are many.
  const int64_t work_per_row = (k + 63) / 64 * 64 * ((n + 31) / 32 * 32) + 16 * (k + n);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 21) / work_per_row);
  parallel_for(0, m, grain, [&](int64_t b, int64_t e) {
    // Equal blocks, rounded up to whole 16-row tiles, rather than full ones and a small last.
    const int64_t blocks = (e - b + most - 1) / most;
    const int64_t block = std::min(most, ((e - b + blocks - 1) / blocks + 15) / 16 * 16);
    const int64_t largest = std::min(block, e - b);
    std::unique_ptr<uint8_t[]> a_holder;
    std::unique_ptr<int32_t[]> acc_holder;
    uint8_t* a = Scratch(a_holder, largest * k);
    int32_t* acc = Scratch(acc_holder, largest * n);
    for (int64_t i0 = b; i0 < e; i0 += block) {
      const int64_t rows = std::min(block, e - i0);
      quantize(i0, rows, a);
      cpu::int8_gemm(rows, a, k, w, acc, n);
      finish(i0, rows, acc);
    }
  });
}

// The input as a quint8 NHWC image with `padding` rows and columns of the zero point around
// it (a quantized tensor pads with the value 0, which the zero point encodes): each kernel
// row's taps are then one contiguous run, and im2row needs no bounds checks.
std::unique_ptr<uint8_t[]> PaddedQuantizedNhwc(const Tensor& x, const std::array<int64_t, 2>& padding,
                                               const ActivationQParams& q) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HP = H + 2 * padding[0], WP = W + 2 * padding[1];
  const Tensor nhwc = x.permute({0, 2, 3, 1}).contiguous();
  const float* src = nhwc.data_ptr<float>();
  std::unique_ptr<uint8_t[]> holder;
  uint8_t* image = Scratch(holder, N * HP * WP * C);
  std::fill(image, image + N * HP * WP * C, static_cast<uint8_t>(q.zero_point));
  parallel_for(0, N * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, W * C)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t n = r / H, h = r % H;
      quantize_to_uint8(src + r * W * C, W * C, q.scale, q.zero_point,
                        image + ((n * HP + h + padding[0]) * WP + padding[1]) * C);
    }
  });
  return holder;
}

// Copies `len` bytes with fixed-size moves: im2row's runs are a few bytes to a few hundred,
// where a call to memcpy per run costs more than the copy.
inline void CopyRun(uint8_t* dst, const uint8_t* src, int64_t len) {
  if (len >= 64) {
    std::memcpy(dst, src, static_cast<size_t>(len));
  } else if (len >= 8) {
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) std::memcpy(dst + i, src + i, 8);
    if (i < len) std::memcpy(dst + len - 8, src + len - 8, 8);  // the tail, overlapping
  } else if (len >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + len - 4, src + len - 4, 4);
  } else {
    for (int64_t i = 0; i < len; ++i) dst[i] = src[i];
  }
}

// ---- export ----
// The int8 kernels run outside the op table, so a capture would see nothing of a quantized
// layer. Each layer opens instead a composite that carries what its QDQ form needs: the input,
// the weights' integers, their float32 scales and the float bias, and the activation
// parameters as attributes; lowering (core/onnx/lower.cc) expands it into
// QuantizeLinear/DequantizeLinear around the float operator, the form onnxruntime fuses back
// into its int8 kernels.

// The weights' scales as float32 (what PyTorch packs and ONNX's DequantizeLinear takes).
Tensor ScaleTensor(const std::vector<float>& scales) {
  Tensor t = empty({static_cast<int64_t>(scales.size())}, kFloat32);
  std::copy(scales.begin(), scales.end(), t.data_ptr<float>());
  return t;
}

exporter::Attributes StaticAttrs(const ActivationQParams& in, const ActivationQParams& out, bool relu,
                                 const QTensor& w) {
  return {{"x_scale", in.scale},           {"x_zero_point", in.zero_point},
          {"y_scale", out.scale},          {"y_zero_point", out.zero_point},
          {"relu", int64_t{relu ? 1 : 0}}, {"axis", is_per_channel(w.qscheme) ? int64_t{0} : int64_t{-1}}};
}

// forward(x) recorded as one composite of `kind` over the input, the weights' integers, their
// float32 scales and the float bias, when a capture records (a forward outside export pays one
// thread-local load).
template <typename Forward>
Tensor ExportedForward(const std::string& kind, const Tensor& x, const QTensor& w, const std::vector<float>& w_scales,
                       const Tensor& bias, exporter::Attributes attrs, const Forward& forward) {
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) {
    node.emplace(kind.c_str(), std::vector<Tensor>{x, w.data, ScaleTensor(w_scales), bias}, std::move(attrs));
  }
  const Tensor y = forward(x);
  return node ? node->finish(y) : y;
}

// A linear layer's input as float32, its last dimension checked against the weight's k.
Tensor LinearInput(const Tensor& input, int64_t k, const std::string& layer) {
  Tensor x = FloatInput(input, layer.c_str());
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == k, layer, ": expected an input whose last dimension is ", k, ", got ",
              shape_str(x.sizes()));
  return x;
}

// A linear layer's output: the input's shape with n as its last dimension, uninitialised.
Tensor LinearOutput(const Tensor& x, int64_t n) {
  IntArray sizes = x.sizes();
  sizes.back() = n;
  return empty(sizes, kFloat32);
}

// A linear layer's [out, in] weight.
void CheckLinearWeight(const QTensor& w, const std::string& layer) {
  ANVIL_CHECK(w.data.dim() == 2, layer, ": expected a [out, in] weight, got ", shape_str(w.sizes()));
}

// The exact float path of QuantizedConv2d (see quantized_layers.h): for inputs of at most this
// many channels, measured on the digits CNN's first layer (1 channel, 5x5, 6 outputs, batch 64:
// 0.078 ms through the int8 GEMM, whose k = 25 and n = 6 fill a fraction of its blocks). With
// 6 channels (its second layer) the int8 GEMM is already faster than float32.
constexpr int64_t kExactFloatMaxChannels = 3;
// 512 x 255 x 128 < 2^24: every partial sum of at most this many products is exact in float32.
constexpr int64_t kExactFloatMaxTerms = 512;

bool UseExactFloatConv(Int8ConvPath path, int64_t in_channels, int64_t terms) {
  static const Int8ConvPath forced = [] {
    const char* v = std::getenv("ANVIL_INT8_CONV");
    if (v == nullptr || *v == '\0') return Int8ConvPath::kAuto;
    if (std::string(v) == "gemm") return Int8ConvPath::kGemm;
    if (std::string(v) == "exact-float") return Int8ConvPath::kExactFloat;
    throw Error(std::string("ANVIL_INT8_CONV='") + v + "': expected gemm or exact-float");
  }();
  if (terms > kExactFloatMaxTerms) return false;  // not exact: the int8 GEMM, whatever was asked
  if (path == Int8ConvPath::kAuto) path = forced;
  if (path != Int8ConvPath::kAuto) return path == Int8ConvPath::kExactFloat;
  return in_channels <= kExactFloatMaxChannels;
}

}  // namespace

QTensor quantize_weight(const Tensor& weight, bool per_channel) {
  const Tensor w = weight.detach().cpu().to(kFloat32);
  ObserverOptions o;
  o.dtype = QDtype::QInt8;
  if (per_channel) {
    o.qscheme = QScheme::PerChannelSymmetric;
    PerChannelMinMaxObserver obs(0, o);
    obs.forward(w);
    const QParams q = obs.calculate_qparams();
    return quantize_per_channel(w, q.scale.to(kFloat64), q.zero_point.to(kInt64), 0, QDtype::QInt8);
  }
  o.qscheme = QScheme::PerTensorSymmetric;
  MinMaxObserver obs(o);
  obs.forward(w);
  const QParams q = obs.calculate_qparams();
  return quantize_per_tensor(w, q.scale.to(kFloat64).to_vector<double>()[0], 0, QDtype::QInt8);
}

// rows [count, kh * kw * C]: for output pixels first .. first + count - 1 (of N * OH * OW, image
// by image, row by row), their taps in (kernel row, kernel column, channel) order, read from
// the padded NHWC image [N, HP, WP, C]. Single-threaded: the caller's pipeline splits pixels.
void QuantizedConv2d::Im2Row(const uint8_t* image, int64_t HP, int64_t WP, int64_t C, int64_t OH, int64_t OW,
                             int64_t first, int64_t count, uint8_t* rows) const {
  // Every size is copied into a local: the byte stores below may alias anything reached through
  // a pointer, which would reload each member after every run.
  const int64_t kh = kh_, kw = kw_, sh = stride_[0], sw = stride_[1], dh = dilation_[0], dw = dilation_[1];
  // With dilation 1 along the width, a kernel row's kw taps are adjacent: one run of kw * C bytes.
  const int64_t run = dw == 1 ? kw * C : C, runs = dw == 1 ? 1 : kw, run_step = dw * C;
  int64_t n = first / (OH * OW), oh = first / OW % OH, ow = first % OW;
  uint8_t* row = rows;
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t i = 0; i < kh; ++i) {
      const uint8_t* src = image + ((n * HP + oh * sh + i * dh) * WP + ow * sw) * C;
      for (int64_t j = 0; j < runs; ++j, row += run) CopyRun(row, src + j * run_step, run);
    }
    if (++ow == OW) {
      ow = 0;
      if (++oh == OH) {
        oh = 0;
        ++n;
      }
    }
  }
}

void check_layer_weight(const QTensor& w, const char* layer) {
  ANVIL_CHECK(w.dtype == QDtype::QInt8, layer, ": expected qint8 weights, got ", qdtype_name(w.dtype));
  ANVIL_CHECK(!is_per_channel(w.qscheme) || w.axis == 0, layer,
              ": expected per-channel weights along the output axis 0, got axis ", w.axis);
  const std::vector<int64_t> zps = w.zero_points.to_vector<int64_t>();
  for (int64_t z : zps)
    ANVIL_CHECK(z == 0, layer, ": expected symmetric weights (zero points 0, as fbgemm packs them), got zero point ",
                z);
  ANVIL_CHECK(w.data.dim() >= 2, layer, ": expected weights of at least 2 dimensions, got ", shape_str(w.sizes()));
}

// ---- the layers' shared parts ----

Int8WeightLayer::Int8WeightLayer(const char* name, QTensor weight) : QuantizedModule(name), weight_(std::move(weight)) {
  check_layer_weight(weight_, name);
}

void Int8WeightLayer::SetBias(Tensor bias, int64_t out) {
  bias_ = CheckedBias(std::move(bias), out, type_name().c_str());
}

void Int8WeightLayer::PackWeight(const Tensor& int8_rows) {
  packed_ = PackRows(int8_rows);
  w_scales_ = FloatScales(weight_);
}

GemmEpilogue Int8WeightLayer::Epilogue(const float* bias, bool relu) const {
  return GemmEpilogue{packed_.row_sums().data(), w_scales_.data(), is_per_channel(weight_.qscheme), bias, relu};
}

Tensor Int8WeightLayer::DequantizedWeight(Device device) {
  MutexLock lock(&dequantized_mu_);
  Tensor& w = dequantized_[device.str()];
  if (!w.defined()) w = dequantize(weight_).to(device);
  return w;
}

void Int8WeightLayer::append_state(const std::string& prefix, io::NamedTensors* tensors, io::Metadata* metadata) const {
  append_qtensor(prefix + "weight", weight_, tensors, metadata);
  if (bias_.defined()) tensors->emplace_back(prefix + "bias", bias_);
}

StaticInt8Layer::StaticInt8Layer(const char* name, QTensor weight, ActivationQParams input, ActivationQParams output,
                                 bool relu)
    : Int8WeightLayer(name, std::move(weight)), input_(input), output_(output), relu_(relu) {}

void StaticInt8Layer::CheckActivations() const {
  CheckActivation(input_, type_name().c_str(), "input");
  CheckActivation(output_, type_name().c_str(), "output");
}

void StaticInt8Layer::SetRequantConstants() {
  consts_ = requant_constants(static_cast<float>(input_.scale), w_scales_.data(), is_per_channel(weight_.qscheme),
                              packed_.n(), static_cast<float>(output_.scale));
}

// ---- QuantizedLinear ----

QuantizedLinear::QuantizedLinear(QTensor weight, Tensor bias, ActivationQParams input, ActivationQParams output,
                                 bool relu)
    : StaticInt8Layer("QuantizedLinear", std::move(weight), input, output, relu) {
  CheckLinearWeight(weight_, type_name());
  CheckActivations();
  SetBias(std::move(bias), weight_.data.size(0));
  PackWeight(weight_.data);
  SetRequantConstants();
}

Tensor QuantizedLinear::forward(const Tensor& input) {
  return ExportedForward(type_name(), input, weight_, w_scales_, bias_, StaticAttrs(input_, output_, relu_, weight_),
                         [this](const Tensor& x) { return ForwardInt8(x); });
}

Tensor QuantizedLinear::ForwardInt8(const Tensor& input) {
  const int64_t k = packed_.k(), n = packed_.n();
  const Tensor x = LinearInput(input, k, type_name());
  if (x.device().type != DeviceType::CPU) return ForwardOnCuda(x);
  const int64_t m = x.numel() / std::max<int64_t>(k, 1);
  const float* xp = x.data_ptr<float>();
  Tensor out = LinearOutput(x, n);
  float* o = out.data_ptr<float>();
  const GemmEpilogue e = Epilogue(bias_data(), relu_);
  PipelinedRows(
      m, packed_,
      [&](int64_t i0, int64_t rows, uint8_t* a) {
        quantize_to_uint8(xp + i0 * k, rows * k, input_.scale, input_.zero_point, a);
      },
      [&](int64_t i0, int64_t rows, const int32_t* acc) {
        requantize_to_dequantized_float(acc, n, rows, n, static_cast<int32_t>(input_.zero_point), e, consts_,
                                        static_cast<int32_t>(output_.zero_point), static_cast<float>(output_.scale),
                                        o + i0 * n, n);
      });
  return out;
}

Tensor QuantizedLinear::ForwardOnCuda(const Tensor& x) {
#if ANVIL_WITH_CUDA
  // The int32 sums are exact: the packed weight's k is at most cpu::kMaxInt8GemmK (65536), so
  // |sum| <= 65536 * 128 * 128 = 2^30.
  if (x.device().is_cuda()) {
    const int64_t k = packed_.k();
    const Tensor rows = x.reshape({x.numel() / std::max<int64_t>(k, 1), k});
    Tensor y = OnCuda(x.device().index)->forward(rows);
    if (y.defined()) {
      cuda_path_.store("cublaslt-int8");
      IntArray sizes = x.sizes();
      sizes.back() = packed_.n();
      return y.reshape(sizes);
    }
  }
#endif
  cuda_path_.store("dequantize-compute");
  Tensor y = linear(x, DequantizedWeight(x.device()), BiasOn(x.device()));
  return relu_ ? y.relu() : y;
}

std::shared_ptr<const cuda::StaticInt8Linear> QuantizedLinear::OnCuda(int index) {
#if ANVIL_WITH_CUDA
  MutexLock lock(&cuda_mu_);
  std::shared_ptr<const cuda::StaticInt8Linear>& layer = on_cuda_[index];
  if (layer == nullptr) {
    const int64_t n = packed_.n();
    RequantColumns columns = requant_columns(Epilogue(bias_data(), relu_), consts_, n);
    const Tensor weight = weight_.data.contiguous();
    cuda::StaticInt8Linear::Spec spec;
    spec.weight = weight.data_ptr<int8_t>();
    spec.n = n;
    spec.k = packed_.k();
    spec.row_sums = packed_.row_sums().data();
    spec.bias_term = std::move(columns.bias_term);
    spec.multiplier = std::move(columns.multiplier);
    spec.input_inv_scale = 1.0f / static_cast<float>(input_.scale);  // as quantize_to_uint8 computes it
    spec.input_zero_point = static_cast<int32_t>(input_.zero_point);
    spec.output_zero_point = static_cast<int32_t>(output_.zero_point);
    spec.output_scale = static_cast<float>(output_.scale);
    spec.relu = relu_;
    layer = std::make_shared<const cuda::StaticInt8Linear>(index, spec);
  }
  return layer;
#else
  (void)index;
  throw NotImplementedError("this build of Anvil has no CUDA backend");
#endif
}

std::string QuantizedLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_features()) + ", out_features=" + std::to_string(out_features()) +
         ", scale=" + std::to_string(output_.scale) + ", zero_point=" + std::to_string(output_.zero_point) +
         ", qscheme=" + qscheme_name(weight_.qscheme) + (relu_ ? ", relu" : "");
}

std::string QuantizedLinear::describe() const {
  return Json{{"kind", "linear"},
              {"relu", relu_},
              {"input", ActivationJson(input_)},
              {"output", ActivationJson(output_)},
              {"kernel", cpu::int8_gemm_kernel_name(packed_.kernel())}}
      .dump();
}

// ---- DynamicQuantizedLinear ----

DynamicQuantizedLinear::DynamicQuantizedLinear(QTensor weight, Tensor bias, bool reduce_range,
                                               DynamicActivations activations)
    : Int8WeightLayer("DynamicQuantizedLinear", std::move(weight)),
      reduce_range_(reduce_range),
      activations_(activations) {
  CheckLinearWeight(weight_, type_name());
  SetBias(std::move(bias), weight_.data.size(0));
  PackWeight(weight_.data);
}

Tensor DynamicQuantizedLinear::forward(const Tensor& input) {
  return ExportedForward(type_name(), input, weight_, w_scales_, bias_,
                         {{"axis", is_per_channel(weight_.qscheme) ? int64_t{0} : int64_t{-1}}},
                         [this](const Tensor& x) { return ForwardInt8(x); });
}

Tensor DynamicQuantizedLinear::ForwardInt8(const Tensor& input) {
  const int64_t k = packed_.k(), n = packed_.n();
  const Tensor x = LinearInput(input, k, type_name());
  if (x.device().type != DeviceType::CPU) return linear(x, DequantizedWeight(x.device()), BiasOn(x.device()));
  const int64_t m = x.numel() / std::max<int64_t>(k, 1);
  const float* xp = x.data_ptr<float>();
  const auto [lo, hi] = BatchRange(xp, m * k);
  ANVIL_CHECK(std::isfinite(lo) && std::isfinite(hi), "DynamicQuantizedLinear: the input holds ",
              std::isnan(lo) || std::isnan(hi) ? "NaN" : "an infinite value",
              "; its int8 quantization needs finite values");
  const bool onnx = activations_ == DynamicActivations::kOnnx;
  // The rows' quantization parameters: ONNX's (float32, dividing) or PyTorch's (double, fma).
  OnnxDynamicQParams onnx_q{};
  ChosenQParams torch_q{};
  float a_scale = 0;
  int32_t a_zero_point = 0;
  if (onnx) {
    onnx_q = onnx_dynamic_qparams(lo, hi);
    a_scale = onnx_q.scale;
    a_zero_point = static_cast<int32_t>(onnx_q.zero_point);
  } else {
    torch_q = choose_quantization_params(lo, hi, 0, 255, false, reduce_range_);
    a_scale = static_cast<float>(torch_q.scale);
    a_zero_point = static_cast<int32_t>(torch_q.zero_point);
  }
  // ONNX's graph adds the bias after its Mul, rounding each; fbgemm fuses them (fma).
  const float* bias = bias_data();
  const GemmEpilogue e = Epilogue(onnx ? nullptr : bias, false);
  Tensor out = LinearOutput(x, n);
  float* o = out.data_ptr<float>();
  PipelinedRows(
      m, packed_,
      [&](int64_t i0, int64_t rows, uint8_t* a) {
        if (onnx) {
          quantize_to_uint8_divide(xp + i0 * k, rows * k, onnx_q.scale, onnx_q.zero_point, a);
        } else {
          quantize_to_uint8_fma(xp + i0 * k, rows * k, torch_q.scale, torch_q.zero_point, a);
        }
      },
      [&](int64_t i0, int64_t rows, const int32_t* acc) {
        float* oi = o + i0 * n;
        requantize_to_float(acc, n, rows, n, a_zero_point, a_scale, e, oi, n);
        if (onnx && bias != nullptr)
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < n; ++j) oi[i * n + j] += bias[j];
      });
  return out;
}

std::string DynamicQuantizedLinear::extra_repr() const {
  return "in_features=" + std::to_string(in_features()) + ", out_features=" + std::to_string(out_features()) +
         ", dtype=torch.qint8, qscheme=" + qscheme_name(weight_.qscheme);
}

std::string DynamicQuantizedLinear::describe() const {
  return Json{{"kind", "linear_dynamic"},
              {"reduce_range", reduce_range_},
              {"activations", activations_ == DynamicActivations::kOnnx ? "onnx" : "pytorch"},
              {"kernel", cpu::int8_gemm_kernel_name(packed_.kernel())}}
      .dump();
}

// ---- QuantizedConv2d ----

QuantizedConv2d::QuantizedConv2d(QTensor weight, Tensor bias, const nn::ConvOptions& options, ActivationQParams input,
                                 ActivationQParams output, bool relu, Int8ConvPath path)
    : StaticInt8Layer("QuantizedConv2d", std::move(weight), input, output, relu),
      stride_(options.stride),
      padding_(options.padding),
      dilation_(options.dilation) {
  ANVIL_CHECK(weight_.data.dim() == 4, "QuantizedConv2d: expected a [out, in, kh, kw] weight, got ",
              shape_str(weight_.sizes()));
  ANVIL_CHECK(options.groups == 1, "QuantizedConv2d: grouped convolution (groups=", options.groups,
              ") is not quantized; keep the layer in float");
  out_channels_ = weight_.data.size(0);
  in_channels_ = weight_.data.size(1);
  kh_ = weight_.data.size(2);
  kw_ = weight_.data.size(3);
  if (options.same) {
    for (int d = 0; d < 2; ++d) {
      const int64_t span = dilation_[d] * ((d == 0 ? kh_ : kw_) - 1);
      ANVIL_CHECK(span % 2 == 0,
                  "QuantizedConv2d: padding \"same\" with an even kernel span pads unevenly; "
                  "only symmetric padding is quantized");
      ANVIL_CHECK(stride_[d] == 1, "QuantizedConv2d: padding \"same\" needs stride 1");
      padding_[d] = span / 2;
    }
  }
  CheckActivations();
  SetBias(std::move(bias), out_channels_);
  // [out, in, kh, kw] -> [out, kh, kw, in]: the im2row order, channels innermost.
  PackWeight(weight_.data.permute({0, 2, 3, 1}).contiguous().reshape({out_channels_, -1}));
  SetRequantConstants();
  if (UseExactFloatConv(path, in_channels_, in_channels_ * kh_ * kw_)) exact_float_weight_ = weight_.data.to(kFloat32);
}

Tensor QuantizedConv2d::forward(const Tensor& input) {
  exporter::Attributes attrs = StaticAttrs(input_, output_, relu_, weight_);
  attrs.emplace_back("kernel_shape", std::vector<int64_t>{kh_, kw_});
  attrs.emplace_back("strides", std::vector<int64_t>{stride_[0], stride_[1]});
  attrs.emplace_back("pads", std::vector<int64_t>{padding_[0], padding_[1], padding_[0], padding_[1]});
  attrs.emplace_back("dilations", std::vector<int64_t>{dilation_[0], dilation_[1]});
  return ExportedForward(type_name(), input, weight_, w_scales_, bias_, std::move(attrs),
                         [this](const Tensor& x) { return ForwardInt8(x); });
}

Tensor QuantizedConv2d::ForwardInt8(const Tensor& input) {
  Tensor x = FloatInput(input, "QuantizedConv2d");
  const bool batched = x.dim() == 4;
  ANVIL_CHECK(x.dim() == 3 || x.dim() == 4, "QuantizedConv2d: expected [N, C, H, W] or [C, H, W], got ",
              shape_str(x.sizes()));
  if (!batched) x = x.unsqueeze(0);
  ANVIL_CHECK(x.size(1) == in_channels_, "QuantizedConv2d: expected ", in_channels_, " input channels, got ", x.size(1),
              " (input ", shape_str(input.sizes()), ")");
  if (x.device().type != DeviceType::CPU) {
    nn::functional::Conv2dParams p{stride_, padding_, dilation_, 1, false};
    Tensor y = nn::functional::conv2d(x, DequantizedWeight(x.device()), BiasOn(x.device()), p);
    if (relu_) y = y.relu();
    return batched ? y : y.squeeze(0);
  }
  const int64_t N = x.size(0), C = in_channels_, H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * padding_[0] - dilation_[0] * (kh_ - 1) - 1) / stride_[0] + 1;
  const int64_t OW = (W + 2 * padding_[1] - dilation_[1] * (kw_ - 1) - 1) / stride_[1] + 1;
  ANVIL_CHECK(OH > 0 && OW > 0, "QuantizedConv2d: input ", shape_str(x.sizes()), " is smaller than the kernel's reach");
  if (exact_float_weight_.defined()) {
    const Tensor out = ForwardExactFloat(x, OH, OW);
    return batched ? out : out.squeeze(0);
  }
  const int64_t m = N * OH * OW, HP = H + 2 * padding_[0], WP = W + 2 * padding_[1];
  const std::unique_ptr<uint8_t[]> image = PaddedQuantizedNhwc(x, padding_, input_);
  const int64_t OC = out_channels_, plane = OH * OW;
  Tensor out = empty({N, OC, OH, OW}, kFloat32);
  float* o = out.data_ptr<float>();
  const GemmEpilogue e = Epilogue(bias_data(), relu_);
  PipelinedRows(
      m, packed_,
      [&](int64_t p0, int64_t count, uint8_t* rows) { Im2Row(image.get(), HP, WP, C, OH, OW, p0, count, rows); },
      [&](int64_t p0, int64_t count, const int32_t* acc) {
        // The block's pixels in [pixel, channel] order, then each into its NCHW place.
        std::unique_ptr<float[]> pixels_holder;
        float* pixels = Scratch(pixels_holder, count * OC);
        requantize_to_dequantized_float(acc, OC, count, OC, static_cast<int32_t>(input_.zero_point), e, consts_,
                                        static_cast<int32_t>(output_.zero_point), static_cast<float>(output_.scale),
                                        pixels, OC);
        for (int64_t i = 0; i < count; ++i) {
          const int64_t n = (p0 + i) / plane, p = (p0 + i) % plane;
          for (int64_t c = 0; c < OC; ++c) o[(n * OC + c) * plane + p] = pixels[i * OC + c];
        }
      });
  return batched ? out : out.squeeze(0);
}

Tensor QuantizedConv2d::ForwardExactFloat(const Tensor& x, int64_t OH, int64_t OW) {
  const int64_t count = x.numel(), N = x.size(0), OC = out_channels_, plane = OH * OW;
  // q - zero point, as float32 integers; the float convolution's zero padding is then the
  // quantized tensor's padding (the zero point).
  std::unique_ptr<uint8_t[]> q_holder;
  uint8_t* q = Scratch(q_holder, count);
  Tensor centred = empty(x.sizes(), kFloat32);
  float* c = centred.data_ptr<float>();
  parallel_for(0, count, kElementGrain, [&](int64_t b, int64_t e) {
    quantize_to_uint8(x.data_ptr<float>() + b, e - b, input_.scale, input_.zero_point, q + b);
    dequantize_uint8(q + b, e - b, 1.0, input_.zero_point, c + b);
  });
  Tensor acc;
  {
    // Plain float32 whatever the caller's mode: a bfloat16 region would round the sums.
    NoGradGuard no_grad;
    AutocastGuard float32(DeviceType::CPU, std::nullopt, false);
    acc = nn::functional::conv2d(centred, exact_float_weight_, Tensor(),
                                 nn::functional::Conv2dParams{stride_, padding_, dilation_, 1, false})
              .contiguous();
  }
  ANVIL_CHECK(acc.size(2) == OH && acc.size(3) == OW, "QuantizedConv2d: the float convolution gave ",
              shape_str(acc.sizes()), ", expected [", N, ", ", OC, ", ", OH, ", ", OW, "]");
  // The centred input has no zero point to take out: no row sums.
  GemmEpilogue e = Epilogue(bias_data(), relu_);
  e.w_row_sums = nullptr;
  std::unique_ptr<uint8_t[]> out_holder;
  uint8_t* out_q = Scratch(out_holder, N * OC * plane);
  Tensor out = empty({N, OC, OH, OW}, kFloat32);
  const float* a = acc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  parallel_for(0, N, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, OC * plane)),
               [&](int64_t b, int64_t end) {
                 const int64_t first = b * OC * plane, len = (end - b) * OC * plane;
                 requantize_planes_to_uint8(a + first, end - b, OC, plane, e, consts_,
                                            static_cast<int32_t>(output_.zero_point), out_q + first);
                 dequantize_uint8(out_q + first, len, output_.scale, output_.zero_point, o + first);
               });
  return out;
}

std::string QuantizedConv2d::extra_repr() const {
  return std::to_string(in_channels_) + ", " + std::to_string(out_channels_) + ", kernel_size=(" + std::to_string(kh_) +
         ", " + std::to_string(kw_) + "), stride=(" + std::to_string(stride_[0]) + ", " + std::to_string(stride_[1]) +
         "), scale=" + std::to_string(output_.scale) + ", zero_point=" + std::to_string(output_.zero_point) +
         (relu_ ? ", relu" : "");
}

std::string QuantizedConv2d::describe() const {
  return Json{{"kind", "conv2d"},
              {"relu", relu_},
              {"stride", stride_},
              {"padding", padding_},
              {"dilation", dilation_},
              {"input", ActivationJson(input_)},
              {"output", ActivationJson(output_)},
              {"kernel", exact_float_weight_.defined() ? std::string("exact-float (float32 convolution of the "
                                                                     "int8 integers)")
                                                       : std::string(cpu::int8_gemm_kernel_name(packed_.kernel()))}}
      .dump();
}

// ---- DynamicRnnLinears ----

int64_t DynamicRnnLinears::parameter_count() const {
  int64_t n = 0;
  for (const auto& slot : matrices_)
    for (const Matrix& m : slot)
      if (m.layer != nullptr)
        n += m.layer->qweight().data.numel() + (m.layer->float_bias().defined() ? m.layer->float_bias().numel() : 0);
  return n;
}

void DynamicRnnLinears::Release(nn::RNNBase& rnn) {
  for (int64_t slot = 0; slot < rnn.num_slots(); ++slot)
    for (int which = 0; which < 5; ++which) rnn.weight(slot, which) = Tensor();
}

void DynamicRnnLinears::install(nn::RNNBase& rnn, bool per_channel, bool reduce_range) {
  ANVIL_CHECK(rnn.linears() == nullptr, rnn.type_name(), ": its weights are quantized already");
  std::vector<std::array<Matrix, 5>> matrices(static_cast<size_t>(rnn.num_slots()));
  for (int64_t slot = 0; slot < rnn.num_slots(); ++slot) {
    for (const int which : {nn::RNNBase::kInputWeight, nn::RNNBase::kHiddenWeight, nn::RNNBase::kProjectionWeight}) {
      const Tensor& w = rnn.weight(slot, which);
      if (!w.defined()) continue;
      const Tensor bias = which == nn::RNNBase::kProjectionWeight ? Tensor() : rnn.weight(slot, which + 2);
      Matrix& m = matrices[static_cast<size_t>(slot)][static_cast<size_t>(which)];
      m.name = rnn.weight_name(slot, which);
      m.bias_name = bias.defined() ? rnn.weight_name(slot, which + 2) : "";
      m.layer = std::make_shared<DynamicQuantizedLinear>(quantize_weight(w, per_channel), bias, reduce_range);
    }
  }
  Release(rnn);
  rnn.set_linears(std::shared_ptr<DynamicRnnLinears>(new DynamicRnnLinears(std::move(matrices), reduce_range)));
}

void DynamicRnnLinears::load(nn::RNNBase& rnn, const io::Safetensors& file, const std::string& prefix,
                             bool reduce_range, std::vector<std::string>* consumed) {
  std::vector<std::array<Matrix, 5>> matrices(static_cast<size_t>(rnn.num_slots()));
  for (int64_t slot = 0; slot < rnn.num_slots(); ++slot) {
    for (const int which : {nn::RNNBase::kInputWeight, nn::RNNBase::kHiddenWeight, nn::RNNBase::kProjectionWeight}) {
      const Tensor& w = rnn.weight(slot, which);
      if (!w.defined()) continue;
      Matrix& m = matrices[static_cast<size_t>(slot)][static_cast<size_t>(which)];
      m.name = rnn.weight_name(slot, which);
      const std::string key = prefix + m.name;
      ANVIL_CHECK(has_qtensor(file, key), rnn.type_name(), ": no quantized tensor \"", key, "\"");
      QTensor q = read_qtensor(file, key);
      ANVIL_CHECK(q.sizes() == w.sizes(), rnn.type_name(), ": \"", key, "\" is ", shape_str(q.sizes()),
                  ", the spec's layer has ", shape_str(w.sizes()));
      for (const char* suffix : {"", ".scale", ".zero_point"}) consumed->push_back(key + suffix);
      Tensor bias;
      if (which != nn::RNNBase::kProjectionWeight && rnn.weight(slot, which + 2).defined()) {
        m.bias_name = rnn.weight_name(slot, which + 2);
        const Tensor* b = file.find(prefix + m.bias_name);
        ANVIL_CHECK(b != nullptr, rnn.type_name(), ": no tensor \"", prefix + m.bias_name, "\"");
        bias = *b;
        consumed->push_back(prefix + m.bias_name);
      }
      m.layer = std::make_shared<DynamicQuantizedLinear>(std::move(q), bias, reduce_range);
    }
  }
  Release(rnn);
  rnn.set_linears(std::shared_ptr<DynamicRnnLinears>(new DynamicRnnLinears(std::move(matrices), reduce_range)));
}

Tensor DynamicRnnLinears::apply(const Tensor& x, int64_t slot, int which) const {
  return matrices_[static_cast<size_t>(slot)][static_cast<size_t>(which)].layer->forward(x);
}

void DynamicRnnLinears::append_state(const std::string& prefix, io::NamedTensors* tensors,
                                     io::Metadata* metadata) const {
  for (const auto& slot : matrices_) {
    for (const Matrix& m : slot) {
      if (!m.layer) continue;
      append_qtensor(prefix + m.name, m.layer->qweight(), tensors, metadata);
      if (!m.bias_name.empty()) tensors->emplace_back(prefix + m.bias_name, m.layer->float_bias());
    }
  }
}

// ---- stubs ----

Tensor QuantStub::forward(const Tensor& input) {
  if (!converted_) return input;
  // Exported as QuantizeLinear -> DequantizeLinear with its parameters.
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) {
    node.emplace("QuantizeDequantize", std::vector<Tensor>{input},
                 exporter::Attributes{{"y_scale", qparams_.scale}, {"y_zero_point", qparams_.zero_point}});
  }
  const Tensor y = ForwardInt8(input);
  return node ? node->finish(y) : y;
}

Tensor QuantStub::ForwardInt8(const Tensor& input) {
  const Tensor x = FloatInput(input, "QuantStub");
  if (x.device().type != DeviceType::CPU)
    return dequantize(quantize_per_tensor(x, qparams_.scale, qparams_.zero_point, QDtype::QUInt8)).to(x.device());
  std::unique_ptr<uint8_t[]> holder;
  uint8_t* q = Scratch(holder, x.numel());
  quantize_to_uint8(x.data_ptr<float>(), x.numel(), qparams_.scale, qparams_.zero_point, q);
  Tensor out = empty(x.sizes(), kFloat32);
  dequantize_uint8(q, x.numel(), qparams_.scale, qparams_.zero_point, out.data_ptr<float>());
  return out;
}

}  // namespace anvil::quant
