// Mixed precision on the CPU: float32 against bfloat16 autocast, Anvil beside PyTorch 2.x
// (bench/amp_peer.py, same shapes, same thread count) in one run.
//
//   anvil_bench_amp [PYTHON [gemm|conv|steps]]   PYTHON: an interpreter with torch (default:
//                   the bench venv, $ANVIL_BENCH_PYTHON, else "n/a" in the peer columns; "" for
//                   none); gemm, conv or steps: that table only
//
// Rows: square products (mm of float32 tensors against mm of bfloat16 tensors, all threads;
// and the kernels alone on one thread: the selected float32 sgemm against bf16_gemm),
// convolutions (forward and backward of bfloat16 operands against float32 ones), and training
// steps (forward, cross-entropy, backward, SGD with momentum) of an MLP
// 784-1024-1024-10 at batch 256 and of the lenet5 preset on the digits' 1x8x8 images at batch
// 64, float32 against the forward under AutocastGuard(CPU, bfloat16). Each figure is the median
// of 7 batches of >= 200 ms after a warm-up batch. The one-thread kernel rows also give each
// kernel's share of the core's measured peak (bench/core_peak.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/core_peak.h"
#include "bench/harness.h"
#include "core/amp/autocast.h"
#include "core/anvil.h"
#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/gemm.h"
#include "core/models/spec.h"
#include "core/nn/functional.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/util/cpu_features.h"
#include "core/util/thread_pool.h"

namespace {

using namespace anvil;  // NOLINT: a benchmark program

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median seconds per call over 7 batches of >= 200 ms, after one untimed batch.
double SecondsPerCall(const std::function<void()>& f) {
  f();
  const double t0 = Now();
  f();
  const double once = std::max(Now() - t0, 1e-6);
  const int calls = std::max(1, static_cast<int>(0.2 / once));
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    const double s = Now();
    for (int i = 0; i < calls; ++i) f();
    batches.push_back((Now() - s) / calls);
  }
  std::sort(batches.begin(), batches.end());
  return batches[3];
}

// Convolution rows (the same list as amp_peer.py's CONVS): input, weight, padding.
struct ConvCase {
  std::string key, label;
  IntArray x, w;
  int64_t pad;
};
std::vector<ConvCase> ConvCases() {
  return {{"digits2", "[64,6,4,4] * [16,6,5,5], pad 2 (digits CNN conv 2)", {64, 6, 4, 4}, {16, 6, 5, 5}, 2},
          {"mid", "[32,16,28,28] * [32,16,3,3], pad 1", {32, 16, 28, 28}, {32, 16, 3, 3}, 1},
          {"wide", "[16,64,56,56] * [64,64,3,3], pad 1", {16, 64, 56, 56}, {64, 64, 3, 3}, 1}};
}

// One forward and backward of a convolution with bias whose operands are `dtype`.
double ConvMs(const ConvCase& c, ScalarType dtype) {
  manual_seed(3);
  Tensor x = randn(c.x).to(dtype).requires_grad_(), w = randn(c.w).to(dtype).requires_grad_();
  Tensor b = randn({c.w[0]}).to(dtype).requires_grad_();
  WindowParams p;
  p.kernel = {c.w[2], c.w[3]};
  p.padding = {c.pad, c.pad, c.pad, c.pad};
  const Tensor gy = randn({c.x[0], c.w[0], c.x[2] + 2 * c.pad - c.w[2] + 1, c.x[3] + 2 * c.pad - c.w[3] + 1}).to(dtype);
  return 1e3 * SecondsPerCall([&] {
           x.set_grad(Tensor());
           w.set_grad(Tensor());
           b.set_grad(Tensor());
           convolution(x, w, b, p, 1).backward(gy);
         });
}

std::string Cell(double v, int decimals) { return v > 0 ? anvil::bench::Fixed(v, decimals) : "n/a"; }
std::string Ratio(double num, double den) { return num > 0 && den > 0 ? anvil::bench::Fixed(num / den, 2) : "n/a"; }

std::shared_ptr<nn::Module> Mlp() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(784, 1024));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(1024, 1024));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(1024, 10));
  return m;
}

// Milliseconds per training step, float32 or with the forward under bfloat16 autocast.
double StepMs(const std::shared_ptr<nn::Module>& model, const Tensor& x, const Tensor& y, bool bf16) {
  optim::SGD opt(model->parameters(), optim::Options{{"lr", 1e-3}, {"momentum", 0.9}});
  return 1e3 * SecondsPerCall([&] {
           opt.zero_grad();
           Tensor loss;
           {
             AutocastGuard guard(DeviceType::CPU, kBFloat16, bf16);
             loss = nn::functional::cross_entropy((*model)(x), y);
           }
           loss.backward();
           opt.step();
         });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string python = argc > 1 ? std::string(argv[1]) : anvil::bench::PyTorch2Python();
  const std::string only = argc > 2 ? argv[2] : "";
  const int threads = get_num_threads();
  const CpuFeatures& f = cpu_features();
  std::printf("CPU: %s (%s family %d model %d); features: %s\n", f.model_name.c_str(), f.vendor.c_str(), f.family,
              f.model, f.flags().c_str());
  std::printf("%s\nbf16 GEMM: %s; %d threads\n", anvil::bench::KernelLine().c_str(), cpu::bf16_gemm_kernel_name(),
              threads);
  const anvil::bench::CorePeak peak = anvil::bench::MeasureCorePeak();
  std::printf("One core's peak (register-only chains): float32 FMA %s GFLOP/s, bfloat16 dot %s GFLOP/s (%s x)\n\n",
              Cell(peak.fp32_fma, 1).c_str(), Cell(peak.bf16_dot, 1).c_str(),
              Ratio(peak.bf16_dot, peak.fp32_fma).c_str());

  // The peer's figures: "gemm N fp32 bf16" (GFLOP/s), "conv NAME fp32 bf16" and "step NAME fp32 bf16" (ms).
  std::map<std::string, std::pair<double, double>> peer;
  std::string peer_version = "n/a";
  if (!python.empty() && access(python.c_str(), X_OK) == 0) {
    for (const auto& l :
         anvil::bench::RunLines(python + " " + ANVIL_BENCH_AMP_PEER + " " + std::to_string(threads) + " 2>/dev/null")) {
      if (l.size() >= 2 && l[0] == "version") peer_version = l[1];
      if (l.size() >= 4 && (l[0] == "gemm" || l[0] == "conv" || l[0] == "step"))
        peer[l[0] + " " + l[1]] = {std::atof(l[2].c_str()), std::atof(l[3].c_str())};
    }
  }
  auto peer_of = [&](const std::string& key) {
    const auto it = peer.find(key);
    return it == peer.end() ? std::pair<double, double>{0, 0} : it->second;
  };

  std::printf("### bfloat16 GEMM, GFLOP/s (PyTorch %s beside)\n\n", peer_version.c_str());
  std::printf(
      "| product | Anvil fp32 | Anvil bf16 | bf16 / fp32 | PyTorch fp32 | PyTorch bf16 | PyTorch bf16 / fp32 | "
      "Anvil bf16 / PyTorch bf16 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t n : {1024, 2048}) {
    if (only == "steps" || only == "conv") break;
    manual_seed(1);
    const Tensor a = randn({n, n}), b = randn({n, n});
    const Tensor a16 = a.to(kBFloat16), b16 = b.to(kBFloat16);
    const double flop = 2.0 * double(n) * double(n) * double(n);
    const double g32 = flop / SecondsPerCall([&] { (void)mm(a, b); }) / 1e9;
    const double g16 = flop / SecondsPerCall([&] { (void)mm(a16, b16); }) / 1e9;
    const auto p = peer_of("gemm " + std::to_string(n));
    std::printf("| mm %lld^3, %d threads | %s | %s | %s | %s | %s | %s | %s |\n", static_cast<long long>(n), threads,
                Cell(g32, 1).c_str(), Cell(g16, 1).c_str(), Ratio(g16, g32).c_str(), Cell(p.first, 1).c_str(),
                Cell(p.second, 1).c_str(), Ratio(p.second, p.first).c_str(), Ratio(g16, p.second).c_str());
    // The kernels alone, one thread.
    std::vector<float> c(static_cast<size_t>(n * n));
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    const double k32 =
        flop / SecondsPerCall([&] { cpu::sgemm(false, false, n, n, n, pa, n, pb, n, 0.0f, c.data(), n); }) / 1e9;
    double k16 = 0;
    if (cpu::bf16_gemm_available()) {
      const auto* qa = static_cast<const uint16_t*>(a16.data_ptr());
      const auto* qb = static_cast<const uint16_t*>(b16.data_ptr());
      k16 = flop / SecondsPerCall([&] { cpu::bf16_gemm(n, n, n, qa, n, 1, qb, n, 1, 0.0f, c.data(), n); }) / 1e9;
    }
    // The single-thread kernels also as a share of the core's peak for their instruction.
    const auto of_peak = [](double g, double peak_g) {
      return Cell(g, 1) + (g > 0 && peak_g > 0 ? " (" + anvil::bench::Fixed(100.0 * g / peak_g, 0) + " %)" : "");
    };
    std::printf("| kernel %lld^3, 1 thread (sgemm: %s) | %s | %s | %s | | | | |\n", static_cast<long long>(n),
                cpu::gemm_kernel_name(cpu::gemm_kernel_for(n, n, n)).c_str(), of_peak(k32, peak.fp32_fma).c_str(),
                of_peak(k16, peak.bf16_dot).c_str(), Ratio(k16, k32).c_str());
    std::fflush(stdout);
  }

  std::printf("\n### Convolution forward + backward, ms (bfloat16 operands vs float32)\n\n");
  std::printf(
      "| convolution | Anvil fp32 | Anvil bf16 | speed-up | PyTorch fp32 | PyTorch bf16 | PyTorch speed-up | "
      "Anvil bf16 / PyTorch bf16 (time) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ConvCase& c : ConvCases()) {
    if (only == "gemm" || only == "steps") break;
    const double ms32 = ConvMs(c, kFloat32), ms16 = ConvMs(c, kBFloat16);
    const auto p = peer_of("conv " + c.key);
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", c.label.c_str(), Cell(ms32, 3).c_str(),
                Cell(ms16, 3).c_str(), Ratio(ms32, ms16).c_str(), Cell(p.first, 3).c_str(), Cell(p.second, 3).c_str(),
                Ratio(p.first, p.second).c_str(), Ratio(ms16, p.second).c_str());
    std::fflush(stdout);
  }

  std::printf("\n### Training step, ms (forward under bfloat16 autocast vs float32; SGD momentum 0.9)\n\n");
  std::printf(
      "| model | Anvil fp32 | Anvil bf16 | speed-up | PyTorch fp32 | PyTorch bf16 | PyTorch speed-up | "
      "Anvil bf16 / PyTorch bf16 (time) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  struct StepCase {
    std::string key, label;
    std::function<std::shared_ptr<nn::Module>()> make;
    IntArray input;
    int64_t batch;
  };
  const std::vector<StepCase> steps = {
      {"mlp", "MLP 784-1024-1024-10, batch 256", Mlp, {784}, 256},
      {"lenet5",
       "digits CNN (lenet5 preset, 1x8x8), batch 64",
       [] {
         return models::build_model(models::preset_spec("lenet5", {1, 8, 8}, 10)).module;
       },
       {1, 8, 8},
       64},
  };
  for (const StepCase& s : steps) {
    if (only == "gemm" || only == "conv") break;
    manual_seed(2);
    auto model = s.make();
    IntArray shape = {s.batch};
    for (int64_t d : s.input) shape.push_back(d);
    const Tensor x = randn(shape), y = randint(0, 10, {s.batch});
    const double ms32 = StepMs(model, x, y, false);
    const double ms16 = StepMs(model, x, y, true);
    const auto p = peer_of("step " + s.key);
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", s.label.c_str(), Cell(ms32, 2).c_str(),
                Cell(ms16, 2).c_str(), Ratio(ms32, ms16).c_str(), Cell(p.first, 2).c_str(), Cell(p.second, 2).c_str(),
                Ratio(p.first, p.second).c_str(), Ratio(ms16, p.second).c_str());
    std::fflush(stdout);
  }
  return 0;
}
