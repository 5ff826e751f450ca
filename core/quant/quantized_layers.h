// Quantized layers, after torch.ao.nn.quantized (static) and torch.ao.nn.quantized.dynamic:
// int8 weights (qint8, symmetric, per output channel or per tensor) packed for the int8
// kernel this CPU runs (core/backend/cpu/int8_gemm.h), float32 bias, and PyTorch's (fbgemm's)
// epilogues (requantize.h).
//
// Their forward takes and returns float32, as the float layer they replace: a static layer
// quantizes its input with its input parameters, multiplies in int8, requantizes to uint8
// with its output parameters (ReLU fused as a clamp at the zero point) and dequantizes. When
// the next quantized layer's input parameters are this one's output parameters (convert()
// arranges it), the dequantize/quantize pair between them is exact, so a chain computes
// PyTorch's quantized tensors bit for bit while fitting Sequential and the model specs.
//
// Under an export capture each layer records one composite node (core/export/capture.h) that
// ONNX lowering expands into its QDQ form (docs/onnx.md, "Quantized models").
//
// Each layer can write its state as quantized companions (serialize.h) and read it back, and
// describes itself (kind, options, activation parameters) as JSON for the model archive.
//
// Inputs on a CUDA device: the static Linear runs in int8 there, through cuBLASLt
// (core/backend/cuda/int8_linear.h: the CPU's bits), where cuBLASLt has an int8 algorithm for
// the shape; every other case runs dequantize-compute, the weights dequantized once per device
// and the float layer's op there. cuda_path() says which a layer took last.
//
// Thread-safety: as nn::Module; forward mutates nothing but the per-device copies, made under
// a lock on first use, and may run concurrently in eval mode.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/cpu/int8_gemm.h"
#include "core/io/safetensors.h"
#include "core/nn/conv.h"
#include "core/nn/module.h"
#include "core/nn/rnn.h"
#include "core/quant/qtensor.h"
#include "core/quant/requantize.h"
#include "core/util/mutex.h"

namespace anvil::cuda {
class StaticInt8Linear;
}  // namespace anvil::cuda

namespace anvil::quant {

// A per-tensor quint8 quantization of activations.
struct ActivationQParams {
  double scale = 1.0;
  int64_t zero_point = 0;
  bool operator==(const ActivationQParams& o) const { return scale == o.scale && zero_point == o.zero_point; }
};

// What every quantized layer offers besides forward.
class QuantizedModule : public nn::Module {
 public:
  using nn::Module::Module;
  // The layer's description for the archive, JSON text: {"kind": ..., options, activation parameters}.
  virtual std::string describe() const = 0;
  // Its tensors as "<prefix>weight" (quantized companions) and "<prefix>bias".
  virtual void append_state(const std::string& prefix, io::NamedTensors* tensors, io::Metadata* metadata) const = 0;
  // The int8 weight, as QTensor (for export and size accounting).
  virtual const QTensor& qweight() const = 0;
  virtual const Tensor& float_bias() const = 0;
};

// A float weight quantized as PyTorch's default weight observers do: qint8, symmetric, per
// output channel (default_per_channel_weight_observer) or per tensor (default_weight_observer).
QTensor quantize_weight(const Tensor& weight, bool per_channel);

// Weights as the layers take them: qint8, per-tensor or per-channel (axis 0) symmetric (zero
// points 0). Others are refused with the reason.
void check_layer_weight(const QTensor& w, const char* layer);

// What the int8 layers below hold and do alike: the int8 weight and float32 bias they were
// built from (what they write and export), the weight packed for this CPU's kernel with its
// scales as float32, and, for inputs on another device, the weights dequantized there once.
class Int8WeightLayer : public QuantizedModule {
 public:
  void append_state(const std::string& prefix, io::NamedTensors* tensors, io::Metadata* metadata) const override;
  const QTensor& qweight() const override { return weight_; }
  const Tensor& float_bias() const override { return bias_; }

 protected:
  // Checks the weight (check_layer_weight). `name`, the module's type name, starts the layer's
  // errors and names its export composite.
  Int8WeightLayer(const char* name, QTensor weight);
  // The bias, checked to hold `out` values, kept as contiguous float32 on the CPU.
  void SetBias(Tensor bias, int64_t out);
  // Packs the weight's integers, given as [n, k] rows in the kernel's k order, and its scales.
  void PackWeight(const Tensor& int8_rows);
  // The int8 product's epilogue over the packed weight (its row sums, which take out the
  // activations' zero point, and its scales), adding `bias` and clamping with `relu`.
  GemmEpilogue Epilogue(const float* bias, bool relu) const;
  const float* bias_data() const { return bias_.defined() ? bias_.data_ptr<float>() : nullptr; }
  // Dequantize-compute: the weights dequantized on `device` (made there on first use), and
  // the bias there.
  Tensor DequantizedWeight(Device device);
  Tensor BiasOn(Device device) const { return bias_.defined() ? bias_.to(device) : bias_; }

  QTensor weight_;
  Tensor bias_;  // float32 [out], or undefined
  cpu::PackedInt8Weight packed_;
  std::vector<float> w_scales_;

 private:
  Mutex dequantized_mu_;
  std::map<std::string, Tensor> dequantized_ ABSL_GUARDED_BY(dequantized_mu_);  // by device name
};

// The static layers' activation side: input and output parameters fixed at conversion, ReLU
// fused as a clamp at the output zero point, and the uint8 epilogue's constants.
class StaticInt8Layer : public Int8WeightLayer {
 public:
  const ActivationQParams& input_qparams() const { return input_; }
  const ActivationQParams& output_qparams() const { return output_; }
  bool relu() const { return relu_; }

 protected:
  StaticInt8Layer(const char* name, QTensor weight, ActivationQParams input, ActivationQParams output, bool relu);
  // Refuses parameters that are not a quint8 quantization (scale positive and finite, zero
  // point in 0..255), the input's first.
  void CheckActivations() const;
  // The uint8 epilogue's constants, once the weight is packed.
  void SetRequantConstants();

  ActivationQParams input_, output_;
  bool relu_;
  RequantConstants consts_;  // the uint8 epilogue's per-column constants (fixed by the parameters)
};

// Static int8 Linear (torch.ao.nn.quantized.Linear, LinearReLU with relu).
class QuantizedLinear : public StaticInt8Layer {
 public:
  QuantizedLinear(QTensor weight, Tensor bias, ActivationQParams input, ActivationQParams output, bool relu);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::string describe() const override;
  int64_t in_features() const { return packed_.k(); }
  int64_t out_features() const { return packed_.n(); }
  // How the last forward on a CUDA device ran: "cublaslt-int8", "dequantize-compute", or ""
  // before any.
  const char* cuda_path() const { return cuda_path_.load(); }

 private:
  Tensor ForwardInt8(const Tensor& x);
  // A CUDA input: int8 through cuBLASLt, or dequantize-compute.
  Tensor ForwardOnCuda(const Tensor& x);
  // The layer's weights and constants on CUDA device `index`, uploaded on first use.
  std::shared_ptr<const cuda::StaticInt8Linear> OnCuda(int index);

  Mutex cuda_mu_;
  std::map<int, std::shared_ptr<const cuda::StaticInt8Linear>> on_cuda_ ABSL_GUARDED_BY(cuda_mu_);
  std::atomic<const char*> cuda_path_{""};
};

// Dynamic int8 Linear (torch.ao.nn.quantized.dynamic.Linear): each batch's activations are
// quantized with parameters chosen from its own min and max (choose_qparams.h; reduce_range
// as fbgemm on CPUs without VNNI), the result is float32.
//
// With DynamicActivations::kOnnx it computes ONNX's dynamic form instead, the graph
// DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W) -> Cast -> Mul(x_scale * w_scale)
// [-> Add(bias)] that onnxruntime's quantizer and Anvil's export write (what the importer
// fuses into this layer): the batch's range widened to hold 0, scale = (hi - lo) / 255 (1 for
// an all-zero batch), zero point = round(-lo / scale) clamped to [0, 255], x_q =
// clamp(round(x / scale) + zero point, 0, 255), and the int32 sums times the float32 product
// x_scale * w_scale, then plus the bias, each operation rounded as the graph rounds it.
enum class DynamicActivations { kPyTorch, kOnnx };
class DynamicQuantizedLinear : public Int8WeightLayer {
 public:
  DynamicQuantizedLinear(QTensor weight, Tensor bias, bool reduce_range,
                         DynamicActivations activations = DynamicActivations::kPyTorch);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::string describe() const override;
  bool reduce_range() const { return reduce_range_; }
  DynamicActivations activations() const { return activations_; }
  int64_t in_features() const { return packed_.k(); }
  int64_t out_features() const { return packed_.n(); }

 private:
  Tensor ForwardInt8(const Tensor& x);
  bool reduce_range_;
  DynamicActivations activations_;
};

// The matrix products of a dynamically quantized LSTM / GRU (torch.ao.nn.quantized.dynamic
// LSTM / GRU): one DynamicQuantizedLinear per weight matrix with its bias, so the input
// projection of a whole sequence is quantized at once and each step's hidden projection on its
// own, as ATen's quantized_lstm / quantized_gru do. Installed into the RNN (RNNBase::Linears),
// which then holds no float weights or biases: they are this object's.
class DynamicRnnLinears : public nn::RNNBase::Linears {
 public:
  // Quantizes `rnn`'s matrices (per output channel or per tensor) and installs the result.
  static void install(nn::RNNBase& rnn, bool per_channel, bool reduce_range);
  // Reads an installed one's tensors back from `file` under `prefix` (the RNN's path and a
  // dot) and installs it; the tensors used are appended to `consumed`.
  static void load(nn::RNNBase& rnn, const io::Safetensors& file, const std::string& prefix, bool reduce_range,
                   std::vector<std::string>* consumed);
  Tensor apply(const Tensor& x, int64_t slot, int which) const override;
  // The int8 weights as quantized companions and the biases, under the RNN's parameter names.
  void append_state(const std::string& prefix, io::NamedTensors* tensors, io::Metadata* metadata) const;
  bool reduce_range() const { return reduce_range_; }
  // The int8 weights' and the biases' elements: the float parameters they replaced.
  int64_t parameter_count() const;

 private:
  struct Matrix {
    std::string name;  // the parameter it replaces ("weight_ih_l0")
    std::shared_ptr<DynamicQuantizedLinear> layer;
    std::string bias_name;  // "" without a bias
  };
  DynamicRnnLinears(std::vector<std::array<Matrix, 5>> matrices, bool reduce_range)
      : matrices_(std::move(matrices)), reduce_range_(reduce_range) {}
  static void Release(nn::RNNBase& rnn);
  std::vector<std::array<Matrix, 5>> matrices_;  // per slot, indexed by `which` (0, 1, 4 used)
  bool reduce_range_;
};

// Static int8 Conv2d (torch.ao.nn.quantized.Conv2d, ConvReLU2d with relu): groups 1,
// symmetric padding (an odd "same" kernel is symmetric). Padding holds the input's zero
// point, as a quantized tensor pads with the value 0.
//
// Two ways to the same int32 sums, chosen at construction:
//   int8 GEMM    the input quantized to a padded NHWC image, im2row, the int8 GEMM, the
//                epilogue, NCHW again;
//   exact float  for inputs of few channels (an image's first layer: 1 or 3), where the int8
//                GEMM's blocks are mostly padding: the centred quantized input (q - zero
//                point) and the int8 weights as float32 through the float convolution. Each
//                sum has at most 512 terms of |x| <= 255 and |w| <= 128, so every partial
//                sum is an integer below 2^24 and float32 holds it exactly, in any order: the
//                same sums, hence the same bits, as the int8 GEMM.
// `path` picks one (kAuto: by the input channels); ANVIL_INT8_CONV=gemm|exact-float forces one
// for every kAuto layer (tests, benchmarks). The exact float path applies only where the sums
// stay exact (at most 512 terms); elsewhere the int8 GEMM runs whatever was asked.
enum class Int8ConvPath { kAuto, kGemm, kExactFloat };

class QuantizedConv2d : public StaticInt8Layer {
 public:
  QuantizedConv2d(QTensor weight, Tensor bias, const nn::ConvOptions& options, ActivationQParams input,
                  ActivationQParams output, bool relu, Int8ConvPath path = Int8ConvPath::kAuto);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::string describe() const override;
  const std::array<int64_t, 2>& stride() const { return stride_; }
  const std::array<int64_t, 2>& padding() const { return padding_; }
  const std::array<int64_t, 2>& dilation() const { return dilation_; }
  // The path chosen at construction: kGemm or kExactFloat.
  Int8ConvPath path() const { return exact_float_weight_.defined() ? Int8ConvPath::kExactFloat : Int8ConvPath::kGemm; }

 private:
  Tensor ForwardInt8(const Tensor& x);
  Tensor ForwardExactFloat(const Tensor& x, int64_t OH, int64_t OW);
  void Im2Row(const uint8_t* image, int64_t HP, int64_t WP, int64_t C, int64_t OH, int64_t OW, int64_t first,
              int64_t count, uint8_t* rows) const;

  // weight_ is [out, in, kh, kw]; packed_ [out, kh * kw * in], the im2row order (kernel
  // position, then channel).
  std::array<int64_t, 2> stride_, padding_, dilation_;
  int64_t in_channels_, out_channels_, kh_, kw_;
  Tensor exact_float_weight_;  // [out, in, kh, kw] float32 integers; defined when the exact float path is chosen
};

// torch.ao.quantization.QuantStub after convert: rounds its input to the quint8 grid of its
// parameters (quantize, then dequantize). Before calibration it is the identity.
class QuantStub : public nn::Module {
 public:
  QuantStub() : Module("QuantStub") {}
  explicit QuantStub(ActivationQParams q) : Module("QuantStub"), qparams_(q), converted_(true) {}
  Tensor forward(const Tensor& x) override;
  bool converted() const { return converted_; }
  const ActivationQParams& qparams() const { return qparams_; }

 private:
  Tensor ForwardInt8(const Tensor& x);
  ActivationQParams qparams_;
  bool converted_ = false;
};

// torch.ao.quantization.DeQuantStub: the boundary back to float (the identity here, since the
// layers already return float32).
class DeQuantStub : public nn::Module {
 public:
  DeQuantStub() : Module("DeQuantStub") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace anvil::quant
