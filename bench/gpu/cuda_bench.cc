// GPU benchmarks of the CUDA backend, each beside its own ceiling measured in the same run:
//   sgemm (TF32 off) and bf16 GEMM through anvil::mm  vs  cuBLAS called directly;
//   element-wise add through the engine               vs  a device-to-device copy (GB/s);
//   the static int8 Linear (cuBLASLt, its quantize and requantize kernels included)
//                                                     vs  the float32 Linear on the same GPU;
//   a training step of an MLP and of a small CNN      (PyTorch's figures: torch_step.py);
//   device mallocs in 100 steady-state training steps (goal: 0).
// Timing: CUDA events on the current stream around `reps` repetitions after warm-ups.
// Prints one line per row: name, Anvil, peer, unit, ratio (Anvil / peer).
//   anvil_cuda_bench [--quick]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "core/anvil.h"
#include "core/backend/cuda/backend.h"
#include "core/backend/cuda/blas.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/quant/quantized_layers.h"

using namespace anvil;

namespace {

// Mean milliseconds of fn over reps runs (after warmup runs), timed with CUDA events.
double TimeMs(const std::function<void()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaStream_t s = cuda::current_stream(0);
  cudaEvent_t start, stop;
  ANVIL_CUDA_CHECK(cudaEventCreate(&start));
  ANVIL_CUDA_CHECK(cudaEventCreate(&stop));
  ANVIL_CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < reps; ++i) fn();
  ANVIL_CUDA_CHECK(cudaEventRecord(stop, s));
  ANVIL_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  ANVIL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / reps;
}

void Row(const char* name, double anvil, double peer, const char* unit) {
  std::printf("%-52s %12.2f %12.2f  %-8s %6.2f\n", name, anvil, peer, unit, peer > 0 ? anvil / peer : 0.0);
}

void Gemm(int64_t n, ScalarType dt, const char* name, int reps) {
  const TensorOptions o = TensorOptions(dt).with_device(CUDA(0));
  const Tensor a = randn({n, n}).to(CUDA(0)).to(dt), b = randn({n, n}).to(CUDA(0)).to(dt);
  Tensor c = empty({n, n}, o);
  const double flops = 2.0 * n * n * n;
  const double anvil_ms = TimeMs([&] { c = mm(a, b); }, 3, reps);
  // cuBLAS directly on the same buffers (row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ).
  cublasHandle_t h = cuda::blas_handle(0);
  const float alpha = 1, beta = 0;
  const cudaDataType_t t = dt == kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const double peer_ms = TimeMs(
      [&] {
        ANVIL_CUBLAS_CHECK(cuda::cublas().gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(n), int(n), &alpha,
                                               b.data_ptr(), t, int(n), a.data_ptr(), t, int(n), &beta, c.data_ptr(), t,
                                               int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      3, reps);
  Row(name, flops / anvil_ms / 1e9, flops / peer_ms / 1e9, "TFLOP/s");
}

void Elementwise(int64_t n, int reps) {
  const Tensor a = randn({n}).to(CUDA(0)), b = randn({n}).to(CUDA(0));
  Tensor c = empty({n}, TensorOptions(kFloat32).with_device(CUDA(0)));
  const double anvil_ms = TimeMs([&] { c = a + b; }, 3, reps);
  const double peer_ms = TimeMs(
      [&] {
        ANVIL_CUDA_CHECK(cudaMemcpyAsync(c.data_ptr(), a.data_ptr(), size_t(n) * 4, cudaMemcpyDeviceToDevice,
                                         cuda::current_stream(0)));
      },
      3, reps);
  // Bytes moved: add reads two and writes one; a copy reads one and writes one.
  Row("add f32 (vs d2d copy)", 3.0 * n * 4 / anvil_ms / 1e6, 2.0 * n * 4 / peer_ms / 1e6, "GB/s");
}

// The static int8 Linear's forward against the float32 Linear it replaces, both on the GPU,
// in TOP/s (2 m n k per forward): the ratio is int8's speed over float32's.
void Int8Linear(int64_t m, int64_t n, int64_t k, int reps) {
  const Tensor w = randn({n, k}) * 0.05, b = randn({n});
  quant::QuantizedLinear int8(quant::quantize_weight(w, /*per_channel=*/true), b,
                              quant::ActivationQParams{8.0 / 255, 128}, quant::ActivationQParams{0.1, 128},
                              /*relu=*/false);
  const Tensor x = randn({m, k}).to(CUDA(0)), w_gpu = w.to(CUDA(0)), b_gpu = b.to(CUDA(0));
  NoGradGuard g;
  Tensor y;
  const double int8_ms = TimeMs([&] { y = int8.forward(x); }, 3, reps);
  const char* path = int8.cuda_path();
  const double float_ms = TimeMs([&] { y = linear(x, w_gpu, b_gpu); }, 3, reps);
  const double ops = 2.0 * m * n * k;
  const std::string name = "int8 Linear " + std::to_string(k) + "->" + std::to_string(n) + " b" + std::to_string(m) +
                           " (vs fp32, " + path + ")";
  Row(name.c_str(), ops / int8_ms / 1e9, ops / float_ms / 1e9, "TOP/s");
}

// Milliseconds per training step and device mallocs over 100 steady-state steps.
std::pair<double, int64_t> TrainStep(nn::Module& model, const Tensor& x, const Tensor& y, int reps) {
  model.to(CUDA(0));
  optim::SGD opt(model.parameters(), {{"lr", 0.01}, {"momentum", 0.9}});
  auto step = [&] {
    opt.zero_grad();
    nn::functional::cross_entropy(model.forward(x), y).backward();
    opt.step();
  };
  const double ms = TimeMs(step, 5, reps);
  const int64_t before = cuda::memory_stats(0).num_device_mallocs;
  for (int i = 0; i < 100; ++i) step();
  cuda::synchronize_stream(0);
  return {ms, cuda::memory_stats(0).num_device_mallocs - before};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (!cuda_is_available()) {
    std::printf("no usable CUDA device: %s\n", cuda_unavailable_reason().c_str());
    return 2;
  }
  cuda::set_allow_tf32(false);
  manual_seed(0);
  std::printf("%-52s %12s %12s  %-8s %6s\n", "benchmark", "anvil", "peer", "unit", "ratio");
  const int reps = quick ? 5 : 20;
  Gemm(quick ? 2048 : 8192, kFloat32, "sgemm (vs cuBLAS, TF32 off)", reps);
  Gemm(quick ? 4096 : 8192, kBFloat16, "bf16 gemm (vs cuBLAS)", reps);
  Elementwise(int64_t{1} << (quick ? 24 : 28), reps);
  Int8Linear(256, 1024, 1024, reps);
  Int8Linear(quick ? 2048 : 8192, 4096, 4096, reps);
  {
    nn::Sequential mlp{std::make_shared<nn::Linear>(1024, 4096), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(4096, 4096), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(4096, 10)};
    const Tensor x = randn({512, 1024}).to(CUDA(0)), y = randint(0, 10, {512}).to(CUDA(0));
    const auto [ms, mallocs] = TrainStep(mlp, x, y, reps);
    std::printf("%-52s %12.3f %12s  %-8s\n", "mlp train step 512x1024-4096-4096-10", ms, "torch_step.py", "ms");
    std::printf("%-52s %12lld %12d  %-8s\n", "device mallocs, 100 steady steps", static_cast<long long>(mallocs), 0,
                "count");
  }
  {
    nn::Sequential cnn{
        std::make_shared<nn::Conv2d>(3, 32, std::array<int64_t, 2>{3, 3}, nn::ConvOptions{.same = true}),
        std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}),
        std::make_shared<nn::Conv2d>(32, 64, std::array<int64_t, 2>{3, 3}, nn::ConvOptions{.same = true}),
        std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}),
        std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(64 * 8 * 8, 10)};
    const Tensor x = randn({256, 3, 32, 32}).to(CUDA(0)), y = randint(0, 10, {256}).to(CUDA(0));
    const auto [ms, mallocs] = TrainStep(cnn, x, y, reps);
    std::printf("%-52s %12.3f %12s  %-8s\n", "cnn train step 256x3x32x32", ms, "torch_step.py", "ms");
    std::printf("%-52s %12lld %12d  %-8s\n", "cnn device mallocs, 100 steps", static_cast<long long>(mallocs), 0,
                "count");
  }
  return 0;
}
