#include <vector>

#include "core/backend/cuda/blas_lt.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/int8_linear.h"
#include "core/backend/cuda/loops.cuh"
#include "core/backend/cuda/runtime.h"
#include "core/ops/functions.h"
#include "core/quant/int8_elements.h"
#include "core/util/error.h"

namespace anvil::cuda {
namespace {

namespace element = quant::element;

constexpr int64_t kPad = 16;
int64_t Padded(int64_t v) { return (v + kPad - 1) / kPad * kPad; }

// a[i, c] = the uint8 quantization of x[i, c] less 128, zero in the padding columns c >= k.
__global__ void QuantizeRowsKernel(const float* x, int64_t m, int64_t k, int64_t ld, float inv_scale, float zero_point,
                                   int8_t* a) {
  const int64_t total = m * ld;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / ld, c = t % ld;
    a[t] = c < k ? static_cast<int8_t>(
                       static_cast<int32_t>(element::QuantizeToUint8(x[i * k + c], inv_scale, zero_point)) - 128)
                 : int8_t{0};
  }
}

// out[i, j] = the uint8 epilogue of the product's sum, dequantized.
__global__ void RequantizeRowsKernel(const int32_t* acc, int64_t m, int64_t n, int64_t ld, const int32_t* row_sums,
                                     const float* bias_term, const float* multiplier, int32_t a_zero_point,
                                     int32_t out_zero_point, int32_t lo, float out_scale, float* out) {
  const int64_t total = m * n;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / n, j = t % n;
    const int32_t raw = element::Compensated(acc[i * ld + j], a_zero_point, row_sums[j]);
    const int32_t q = element::RequantizeToUint8(
        static_cast<float>(raw), bias_term != nullptr ? bias_term + j : nullptr, multiplier[j], out_zero_point, lo);
    out[t] = element::DequantizeUint8(q, out_zero_point, out_scale);
  }
}

TensorOptions On(int device, ScalarType dtype) { return TensorOptions(dtype).with_device(CUDA(device)); }

// A host vector padded with zeros to `size`, as a tensor on `device`.
template <typename T>
Tensor Upload(const T* values, int64_t count, int64_t size, int device) {
  std::vector<T> padded(static_cast<size_t>(size), T{0});
  for (int64_t i = 0; i < count; ++i) padded[static_cast<size_t>(i)] = values[i];
  return tensor(padded).to(CUDA(device));
}

}  // namespace

StaticInt8Linear::StaticInt8Linear(int device, const Spec& s)
    : device_(device),
      n_(s.n),
      k_(s.k),
      n_padded_(Padded(s.n)),
      k_padded_(Padded(s.k)),
      input_inv_scale_(s.input_inv_scale),
      input_zero_point_(static_cast<float>(s.input_zero_point)),
      output_zero_point_(s.output_zero_point),
      output_scale_(s.output_scale),
      relu_(s.relu) {
  ANVIL_CHECK(s.n > 0 && s.k > 0 && s.weight != nullptr && s.row_sums != nullptr &&
                  static_cast<int64_t>(s.multiplier.size()) == s.n &&
                  (s.bias_term.empty() || static_cast<int64_t>(s.bias_term.size()) == s.n),
              "StaticInt8Linear: expected an [n, k] weight with n row sums and n column constants, got n=", s.n,
              " k=", s.k, " and ", s.multiplier.size(), " multipliers");
  std::vector<int8_t> w(static_cast<size_t>(n_padded_ * k_padded_), int8_t{0});
  for (int64_t j = 0; j < n_; ++j)
    for (int64_t c = 0; c < k_; ++c) w[static_cast<size_t>(j * k_padded_ + c)] = s.weight[j * k_ + c];
  weight_ = tensor(w, IntArray{n_padded_, k_padded_}).to(CUDA(device));
  row_sums_ = Upload(s.row_sums, n_, n_padded_, device);
  multiplier_ = Upload(s.multiplier.data(), n_, n_padded_, device);
  if (!s.bias_term.empty()) bias_term_ = Upload(s.bias_term.data(), n_, n_padded_, device);
  // The uploads were queued on this thread's stream, and forward runs on whichever stream its
  // caller's thread has (each serving worker has its own): wait for them once here, so no
  // other stream can read the weights before they have landed.
  wait_for_stream(current_stream(device));
}

StaticInt8Linear::~StaticInt8Linear() {
  // Products queued on other streams may still read the weights, whose memory returns to this
  // thread's stream's pool, free for its next allocation, as the members are destroyed.
  DeviceGuard guard(device_);
  (void)cudaDeviceSynchronize();
}

Tensor StaticInt8Linear::forward(const Tensor& x) const {
  ANVIL_CHECK(
      x.dtype() == kFloat32 && x.dim() == 2 && x.size(1) == k_ && x.is_contiguous() && x.device() == CUDA(device_),
      "StaticInt8Linear: expected a contiguous float32 [m, ", k_, "] input on cuda:", device_, ", got ",
      dtype_name(x.dtype()), " ", shape_str(x.sizes()), " on ", x.device());
  const int64_t m = x.size(0);
  Tensor out = empty({m, n_}, On(device_, kFloat32));
  if (m == 0) return out;
  DeviceGuard guard(device_);
  const cudaStream_t stream = current_stream(device_);
  const Tensor a = empty({m, k_padded_}, On(device_, kInt8));
  const Tensor acc = empty({m, n_padded_}, On(device_, kInt32));
  // The input is quantized only once cuBLASLt has an algorithm for the shape.
  const auto quantize = [&] {
    QuantizeRowsKernel<<<GridFor(m * k_padded_), kBlock, 0, stream>>>(
        x.data_ptr<float>(), m, k_, k_padded_, input_inv_scale_, input_zero_point_, a.data_ptr<int8_t>());
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (!int8_matmul_nt(device_, m, n_padded_, k_padded_, a.data_ptr<int8_t>(), weight_.data_ptr<int8_t>(),
                      acc.data_ptr<int32_t>(), quantize))
    return Tensor();
  const int32_t a_zero_point = static_cast<int32_t>(input_zero_point_) - 128;
  RequantizeRowsKernel<<<GridFor(m * n_), kBlock, 0, stream>>>(
      acc.data_ptr<int32_t>(), m, n_, n_padded_, row_sums_.data_ptr<int32_t>(),
      bias_term_.defined() ? bias_term_.data_ptr<float>() : nullptr, multiplier_.data_ptr<float>(), a_zero_point,
      output_zero_point_, relu_ ? output_zero_point_ : 0, output_scale_, out.data_ptr<float>());
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace anvil::cuda
