// The CUDA backend. On every machine: the backend's kernel table covers the op table (when
// it is built), and asking for a CUDA tensor without a usable GPU is a clear error, never a
// crash. With a GPU: every op matches the CPU forward and backward (fp32, TF32 off, relative
// error <= 1e-5) on the shared samples, including non-contiguous and broadcast inputs;
// random draws reproduce the CPU's Philox streams. (Training on the GPU: tests/nn.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "core/anvil.h"
#include "core/backend/registry.h"
#include "core/ops/op_table.h"
#include "tests/core/op_samples.h"

#if ANVIL_WITH_CUDA
#include "core/backend/cuda/backend.h"
#include "core/backend/cuda/blas.h"
#include "core/backend/cuda/index_options.h"
#endif

using namespace anvil;

namespace {

#define SKIP_WITHOUT_GPU()                                                                            \
  do {                                                                                                \
    if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason(); \
  } while (0)

TEST(CudaBuild, EveryKernelRowOfTheOpTableHasACudaKernel) {
#if ANVIL_WITH_CUDA
  std::vector<std::string> missing;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    if (info.kind == OpKind::View) continue;  // views re-window storage: no kernel on any device
    if (cuda::kernel_table()[static_cast<size_t>(i)] == nullptr) missing.emplace_back(info.name);
  }
  EXPECT_THAT(missing, ::testing::IsEmpty());
#else
  GTEST_SKIP() << "built without the CUDA backend: " << cuda_unavailable_reason();
#endif
}

TEST(CudaRuntime, NoUsableDeviceIsAClearErrorNotACrash) {
  if (cuda_is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_FALSE(cuda_unavailable_reason().empty());
  try {
    zeros({2}, TensorOptions(kFloat32).with_device(CUDA(0)));
    FAIL() << "expected an error";
  } catch (const NotImplementedError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cuda:0 is not available: " + cuda_unavailable_reason()));
  }
  // The CPU is unaffected.
  EXPECT_EQ(ones({3}).sum().item<float>(), 3.0f);
}

// ---- with a GPU ----

// A copy on `device` with the same strides as `t` when t is a permutation of a dense tensor
// (the samples' transposed inputs), so kernels see non-contiguous operands on both devices.
Tensor ToKeepingLayout(const Tensor& t, Device device) {
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  IntArray perm(order.begin(), order.end()), inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return t.permute(perm).contiguous().to(device).permute(inverse);
}

// max |a - b| / max(1, max |b|), on the CPU in float64.
double RelativeError(const Tensor& a, const Tensor& b) {
  Tensor x = a.detach().to(kCPU).to(kFloat64), y = b.detach().to(kCPU).to(kFloat64);
  if (x.numel() == 0) return 0;
  const double scale = std::max(1.0, y.abs().max().item<double>());
  return (x - y).abs().max().item<double>() / scale;
}

struct RunResult {
  std::vector<Tensor> outputs, grads;
};

RunResult RunSample(const samples::OpSample& s, Device device, uint64_t seed) {
  samples::set_sample_device(device);
  std::vector<Tensor> inputs;
  for (const Tensor& in : s.inputs) {
    Tensor x = ToKeepingLayout(in.detach().to(kFloat32), device);
    inputs.push_back(x.requires_grad_());
  }
  RunResult r;
  r.outputs = s.fn(inputs);
  // A fixed random weighting of every output element, generated on the CPU.
  manual_seed(seed);
  Tensor loss;
  for (const Tensor& o : r.outputs) {
    if (!o.requires_grad()) continue;
    Tensor w = randn(o.sizes()).to(device);
    Tensor term = (o * w).sum();
    loss = loss.defined() ? loss + term : term;
  }
  if (loss.defined()) loss.backward();
  for (const Tensor& x : inputs) r.grads.push_back(x.grad());
  samples::set_sample_device(kCPU);
  return r;
}

TEST(CudaParity, EveryOpSampleMatchesTheCpuForwardAndBackward) {
  SKIP_WITHOUT_GPU();
#if ANVIL_WITH_CUDA
  cuda::set_allow_tf32(false);
#endif
  int checked = 0;
  for (auto& [op, list] : samples::MakeOpSamples()) {
    for (const samples::OpSample& s : list) {
      SCOPED_TRACE(s.name);
      const RunResult cpu = RunSample(s, kCPU, 7);
      const RunResult gpu = RunSample(s, CUDA(0), 7);
      ASSERT_EQ(cpu.outputs.size(), gpu.outputs.size());
      for (size_t i = 0; i < cpu.outputs.size(); ++i) {
        EXPECT_EQ(gpu.outputs[i].device(), CUDA(0));
        EXPECT_EQ(gpu.outputs[i].sizes(), cpu.outputs[i].sizes());
        EXPECT_LE(RelativeError(gpu.outputs[i], cpu.outputs[i]), 1e-5) << "output " << i;
      }
      for (size_t i = 0; i < cpu.grads.size(); ++i) {
        ASSERT_EQ(cpu.grads[i].defined(), gpu.grads[i].defined()) << "grad " << i;
        if (cpu.grads[i].defined()) {
          EXPECT_LE(RelativeError(gpu.grads[i], cpu.grads[i]), 1e-5) << "grad " << i;
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 70);
}

// Rows without gradients, and dtypes beyond float32.
TEST(CudaParity, NonDifferentiableRowsAndOtherDtypesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  manual_seed(3);
  const Tensor a = randn({5, 7}), b = randn({7}).t();
  const Tensor ia = randint(-20, 20, {6, 5}), ib = randint(1, 9, {5});
  using F = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, F>> cases = {
      {"eq", [](const Tensor& x, const Tensor& y, const Tensor&, const Tensor&) { return eq(round(x), round(y)); }},
      {"lt_logical",
       [](const Tensor& x, const Tensor& y, const Tensor&, const Tensor&) { return logical_xor(lt(x, y), x > 0.5); }},
      {"isnan_isfinite", [](const Tensor& x, const Tensor&, const Tensor&,
                            const Tensor&) { return logical_and(isfinite(log(x)), logical_not(isnan(x))); }},
      {"argmax", [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&) { return argmax(x, 1); }},
      {"argmin_t", [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&) { return argmin(x.t(), 0); }},
      {"all_any", [](const Tensor& x, const Tensor&, const Tensor&,
                     const Tensor&) { return logical_or(all(x > -3.0, {1}), any(x > 1.0, {1})); }},
      {"nonzero", [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&) { return nonzero(x > 0.3); }},
      {"int_arith",
       [](const Tensor&, const Tensor&, const Tensor& i, const Tensor& j) { return remainder(i * 3 - j, j) + abs(i); }},
      {"int_sum", [](const Tensor&, const Tensor&, const Tensor& i, const Tensor&) { return sum(i, {0}); }},
      {"half", [](const Tensor& x, const Tensor&, const Tensor&,
                  const Tensor&) { return (sigmoid(x.to(kFloat16)) * 2).to(kFloat32); }},
      {"bfloat16_mm", [](const Tensor& x, const Tensor&, const Tensor&,
                         const Tensor&) { return mm(x.to(kBFloat16), x.t().to(kBFloat16)).to(kFloat32); }},
      {"float64", [](const Tensor& x, const Tensor& y, const Tensor&,
                     const Tensor&) { return (exp(x.to(kFloat64)) / y.to(kFloat64)).to(kFloat32); }},
      {"cast_bool_uint8", [](const Tensor& x, const Tensor&, const Tensor&,
                             const Tensor&) { return (x > 0.0).to(kUInt8).to(kInt64) * 3; }},
      {"cumsum", [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&) { return cumsum(x, 0); }},
      {"fmod_fmax_fmin", [](const Tensor& x, const Tensor& y, const Tensor&,
                            const Tensor&) { return fmod(x * 5, y + 3) + fmax(x, y) - fmin(x, y); }},
      {"div_rounding",
       [](const Tensor& x, const Tensor& y, const Tensor& i, const Tensor& j) {
         return div(x * 7, y + 3, "floor") + div(x * 7, y + 3, "trunc") + floor_divide(i, j).to(kFloat32);
       }},
      {"max_pool2d_indices",
       [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&) {
         WindowParams p;
         p.kernel = {3, 2};
         p.stride = {2, 1};
         p.padding = {1, 2, 0, 1};
         return max_pool2d_indices(round(x * 2).reshape({1, 1, 5, 7}), p).to(kFloat32);  // ties
       }},
      {"scatter_reduce",
       [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&) {
         const Tensor idx = remainder(arange(35).reshape({5, 7}), full({}, 3)).narrow(0, 0, 3);
         const Tensor src = x.narrow(0, 0, 3);
         return scatter_reduce(zeros({3, 7}, TensorOptions(kFloat32).with_device(x.device())), 0, idx.to(x.device()),
                               src, "prod", false) +
                scatter_reduce(x.narrow(0, 0, 3), 0, idx.to(x.device()), src, "amax") +
                scatter_reduce(x.narrow(0, 0, 3), 0, idx.to(x.device()), src, "mean", false);
       }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    const Tensor cpu = f(a, b, ia, ib);
    const Tensor gpu = f(a.to(CUDA(0)), b.to(CUDA(0)), ia.to(CUDA(0)), ib.to(CUDA(0)));
    ASSERT_EQ(gpu.sizes(), cpu.sizes());
    EXPECT_EQ(gpu.dtype(), cpu.dtype());
    const double tol = (std::string(name) == "half" || std::string(name) == "bfloat16_mm") ? 1e-2 : 1e-5;
    EXPECT_LE(RelativeError(gpu, cpu), tol);
  }
}

// The indexing kernels' accumulation order: deterministic by default, atomics on request; both
// sum repeated indices to the CPU's result within float32 rounding, and the deterministic path
// gives the same bits on every run.
TEST(CudaIndexing, DeterministicAccumulationIsTheDefaultAndCanBeTurnedOff) {
#if ANVIL_WITH_CUDA
  EXPECT_TRUE(cuda::deterministic_index_accumulate());
  manual_seed(4);
  const Tensor src = randn({4096, 8});
  const Tensor index = remainder(arange(4096), full({}, int64_t{7}));  // every destination many times
  const Tensor cpu = index_add(zeros({7, 8}), 0, index, src);
  for (const bool deterministic : {true, false}) {
    cuda::set_deterministic_index_accumulate(deterministic);
    EXPECT_EQ(cuda::deterministic_index_accumulate(), deterministic);
    if (!cuda_is_available()) continue;
    const auto on_gpu = [&] {
      return index_add(zeros({7, 8}).to(CUDA(0)), 0, index.to(CUDA(0)), src.to(CUDA(0))).to(kCPU);
    };
    const Tensor gpu = on_gpu();
    EXPECT_TRUE(allclose(gpu, cpu, 1e-5, 1e-4));
    if (deterministic) {
      EXPECT_TRUE(equal(gpu, on_gpu())) << "the sorted path is bitwise reproducible";
    }
  }
  cuda::set_deterministic_index_accumulate(true);
#else
  GTEST_SKIP() << "built without the CUDA backend: " << cuda_unavailable_reason();
#endif
}

TEST(CudaParity, RandomDrawsReproduceTheCpuPhiloxStreams) {
  SKIP_WITHOUT_GPU();
  auto draw = [](Device d) {
    manual_seed(42);
    const TensorOptions o = TensorOptions(kFloat32).with_device(d);
    return std::vector<Tensor>{rand({1000}, o), randn({999}, o), bernoulli(full({257}, 0.3, o)),
                               rand({64}, TensorOptions(kFloat64).with_device(d)), arange(0, 10, 0.5, o)};
  };
  const std::vector<Tensor> cpu = draw(kCPU), gpu = draw(CUDA(0));
  for (size_t i = 0; i < cpu.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(RelativeError(gpu[i], cpu[i]), 1e-6);
  }
  EXPECT_EQ(RelativeError(gpu[0], cpu[0]), 0.0);  // uniform floats: bit for bit
}

}  // namespace
