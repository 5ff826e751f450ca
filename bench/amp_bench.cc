// Mixed precision on the CPU: float32 against bfloat16 autocast, Anvil beside PyTorch 2.x
// (bench/amp_peer.py, same shapes, same thread count) in one run.
//
//   anvil_bench_amp [PYTHON [gemm|conv|steps|onednn[-gemm]|split]] PYTHON: an interpreter with
//                   torch (default: the bench venv, $ANVIL_BENCH_PYTHON, else "n/a" in the peer
//                   columns; "" for none); gemm, conv, steps or onednn: that table only
//                   (onednn-gemm: its bf16 products only; split: the ways a bf16 product uses
//                   all threads, interleaved)
//
// Rows: square products (mm of float32 tensors against mm of bfloat16 tensors, all threads;
// and the kernels alone on one thread: the selected float32 sgemm against bf16_gemm),
// convolutions (forward and backward of bfloat16 operands against float32 ones), and training
// steps (forward, cross-entropy, backward, SGD with momentum) of an MLP
// 784-1024-1024-10 at batch 256 and of the lenet5 preset on the digits' 1x8x8 images at batch
// 64, float32 against the forward under AutocastGuard(CPU, bfloat16). Each figure is the median
// of 7 batches of >= 200 ms after a warm-up batch. The one-thread kernel rows also give each
// kernel's share of the core's measured peak (bench/core_peak.h). The onednn tables put the
// bf16 candidates side by side on one thread (onednn_primitives.h): Anvil's bf16 kernel against
// oneDNN's bf16 matmul primitive on cubes and the MLP's products, and bfloat16 convolution
// forward (Anvil's path: widened to float32 or im2col + bf16 GEMM) against oneDNN's bf16
// convolution on the lenet5 and resnet presets' shapes, float32 beside.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
#include "core/backend/cpu/onednn_primitives.h"
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

// A bf16 product of the candidates' table: C [m, n] = A B with A [m, k] (or A^T given) and B
// [k, n] (or B^T given: a Linear weight).
struct Bf16Product {
  std::string label;
  int64_t m, n, k;
  bool ta, tb;
};

// A product's operands: random bfloat16 values (seed 5), A [m, k] or its transpose, B [k, n] or
// its transpose, as the strides say.
struct Bf16Operands {
  Tensor a, b;
  const uint16_t *pa, *pb;
  int64_t a_rs, a_cs, b_rs, b_cs;
  double flop;
  explicit Bf16Operands(const Bf16Product& p) {
    manual_seed(5);
    a = randn({p.m * p.k}).to(kBFloat16);
    b = randn({p.k * p.n}).to(kBFloat16);
    pa = static_cast<const uint16_t*>(a.data_ptr());
    pb = static_cast<const uint16_t*>(b.data_ptr());
    a_rs = p.ta ? 1 : p.k;
    a_cs = p.ta ? p.m : 1;
    b_rs = p.tb ? 1 : p.n;
    b_cs = p.tb ? p.k : 1;
    flop = 2.0 * double(p.m) * double(p.n) * double(p.k);
  }
};

// One thread: Anvil's bf16 kernel against oneDNN's bf16 matmul primitive (built before timing:
// the cache holds it), GFLOP/s.
void OneDnnBf16GemmTable() {
  std::printf("\n### bf16 candidates, one thread: Anvil's kernel vs oneDNN's matmul primitive, GFLOP/s\n\n");
  std::string why;
  if (!cpu::onednn::bf16_available(&why)) {
    std::printf("oneDNN bf16 primitives not available here: %s\n", why.c_str());
    return;
  }
  std::printf("%s; Anvil: %s\n\n", cpu::onednn::version().c_str(), cpu::bf16_gemm_kernel_name());
  std::printf(
      "| product (m x n x k) | Anvil bf16 | oneDNN bf16 | oneDNN / Anvil | oneDNN implementation |\n"
      "|---|---:|---:|---:|---|\n");
  const std::vector<Bf16Product> products = {
      {"256^3", 256, 256, 256, false, false},
      {"1024^3", 1024, 1024, 1024, false, false},
      {"2048^3", 2048, 2048, 2048, false, false},
      {"MLP fwd x W1^T", 256, 1024, 784, false, true},
      {"MLP fwd h W2^T", 256, 1024, 1024, false, true},
      {"MLP fwd h W3^T", 256, 10, 1024, false, true},
      {"MLP fwd h W2^T, half the batch (2 threads)", 128, 1024, 1024, false, true},
      {"MLP bwd grad_x = g W2", 256, 1024, 1024, false, false},
      {"MLP bwd grad_W = g^T h", 1024, 1024, 256, true, false},
      {"MLP bwd grad_W1 = g^T x", 1024, 784, 256, true, false},
      {"MLP bwd grad_W3 = g^T h", 10, 1024, 256, true, false},
      {"MLP bwd grad_h = g W3", 256, 1024, 10, false, false},
      {"Linear 1024x1024, batch 1", 1, 1024, 1024, false, true},
      {"Linear 1024x1024, batch 8", 8, 1024, 1024, false, true},
      {"Linear 1024->16, batch 256", 256, 16, 1024, false, true},
      {"Linear 1024->24, batch 256", 256, 24, 1024, false, true},
      {"lenet5 fc3 84->10, batch 64", 64, 10, 84, false, true},
      {"lenet5 fc1 400->120, batch 64", 64, 120, 400, false, true},
  };
  for (const Bf16Product& p : products) {
    const Bf16Operands o(p);
    const uint16_t *pa = o.pa, *pb = o.pb;
    const int64_t a_rs = o.a_rs, a_cs = o.a_cs, b_rs = o.b_rs, b_cs = o.b_cs;
    std::vector<float> c(static_cast<size_t>(p.m * p.n));
    const double flop = o.flop;
    const auto run = [&](cpu::Bf16GemmCandidate cand) {
      return flop / SecondsPerCall([&] {
               cpu::bf16_gemm_with(cand, p.m, p.n, p.k, pa, a_rs, a_cs, pb, b_rs, b_cs, 0.0f, c.data(), p.n);
             }) /
             1e9;
    };
    const double anvil = run(cpu::Bf16GemmCandidate::kAnvil), onednn = run(cpu::Bf16GemmCandidate::kOneDnn);
    const std::string impl = cpu::onednn::bf16_matmul_impl(p.m, p.n, p.k, a_rs, a_cs, b_rs, b_cs, p.n, 0.0f);
    std::printf("| %s (%lldx%lldx%lld) | %s | %s | %s | %s |\n", p.label.c_str(), static_cast<long long>(p.m),
                static_cast<long long>(p.n), static_cast<long long>(p.k), Cell(anvil, 1).c_str(),
                Cell(onednn, 1).c_str(), Ratio(onednn, anvil).c_str(), impl.c_str());
    std::fflush(stdout);
  }
}

// One thread, forward only: float32, Anvil's bfloat16 path, and oneDNN's bf16 convolution (the
// whole batch in one call, as conv_bf16.cc runs it on one thread; its operands reordered into
// oneDNN's blocked layouts and back inside the call), ms per batch.
void OneDnnConvTable() {
  std::printf("\n### bfloat16 convolution forward, one thread, ms per batch: Anvil vs oneDNN\n\n");
  std::string why;
  if (!cpu::onednn::bf16_available(&why)) {
    std::printf("oneDNN bf16 primitives not available here: %s\n", why.c_str());
    return;
  }
  std::printf(
      "| convolution | Anvil fp32 | Anvil bf16 (path) | oneDNN bf16 | oneDNN / Anvil bf16 (speed) | "
      "oneDNN implementation |\n|---|---:|---:|---:|---:|---|\n");
  struct Case {
    std::string label;
    IntArray x, w;
    int64_t stride, pad;
  };
  const std::vector<Case> cases = {
      {"lenet5 1x8x8 conv1 [64,1,8,8]*[6,1,5,5] p2", {64, 1, 8, 8}, {6, 1, 5, 5}, 1, 2},
      {"lenet5 1x8x8 conv2 [64,6,4,4]*[16,6,5,5] p2", {64, 6, 4, 4}, {16, 6, 5, 5}, 1, 2},
      {"lenet5 1x28x28 conv1 [64,1,28,28]*[6,1,5,5] p2", {64, 1, 28, 28}, {6, 1, 5, 5}, 1, 2},
      {"lenet5 1x28x28 conv2 [64,6,14,14]*[16,6,5,5]", {64, 6, 14, 14}, {16, 6, 5, 5}, 1, 0},
      {"resnet 3x32x32 stem [32,3,32,32]*[16,3,3,3] p1", {32, 3, 32, 32}, {16, 3, 3, 3}, 1, 1},
      {"resnet block1 [32,16,32,32]*[16,16,3,3] p1", {32, 16, 32, 32}, {16, 16, 3, 3}, 1, 1},
      {"resnet block2 [32,16,32,32]*[32,16,3,3] s2 p1", {32, 16, 32, 32}, {32, 16, 3, 3}, 2, 1},
      {"resnet block2 [32,32,16,16]*[32,32,3,3] p1", {32, 32, 16, 16}, {32, 32, 3, 3}, 1, 1},
      {"resnet block3 [32,64,8,8]*[64,64,3,3] p1", {32, 64, 8, 8}, {64, 64, 3, 3}, 1, 1},
      {"wide [16,64,56,56]*[64,64,3,3] p1", {16, 64, 56, 56}, {64, 64, 3, 3}, 1, 1},
  };
  for (const Case& cs : cases) {
    manual_seed(4);
    const Tensor x = randn(cs.x), w = randn(cs.w), b = randn({cs.w[0]});
    const Tensor x16 = x.to(kBFloat16), w16 = w.to(kBFloat16), b16 = b.to(kBFloat16);
    WindowParams p;
    p.kernel = {cs.w[2], cs.w[3]};
    p.stride = {cs.stride, cs.stride};
    p.padding = {cs.pad, cs.pad, cs.pad, cs.pad};
    const double ms32 = 1e3 * SecondsPerCall([&] { (void)convolution(x, w, b, p, 1); });
    const double ms16 = 1e3 * SecondsPerCall([&] { (void)convolution(x16, w16, b16, p, 1); });
    cpu::onednn::Conv2dGeometry g;
    g.n = cs.x[0];
    g.c = cs.x[1];
    g.h = cs.x[2];
    g.w = cs.x[3];
    g.oc = cs.w[0];
    g.kh = cs.w[2];
    g.kw = cs.w[3];
    g.stride_h = g.stride_w = cs.stride;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = cs.pad;
    g.oh = (g.h + 2 * cs.pad - g.kh) / cs.stride + 1;
    g.ow = (g.w + 2 * cs.pad - g.kw) / cs.stride + 1;
    Tensor y16 = empty({cs.x[0], g.oc, g.oh, g.ow}, kBFloat16);
    const auto* px = static_cast<const uint16_t*>(x16.data_ptr());
    const auto* pw = static_cast<const uint16_t*>(w16.data_ptr());
    const auto* pb = static_cast<const uint16_t*>(b16.data_ptr());
    auto* py = static_cast<uint16_t*>(y16.data_ptr());
    const double ms_dnnl = 1e3 * SecondsPerCall([&] { cpu::onednn::bf16_conv2d_forward(g, px, pw, pb, py); });
    // Anvil's path for this shape: im2col + bf16 GEMM from conv_bf16.cc's threshold, else widened.
    const bool gemm_path = cs.w[0] * cs.w[1] * cs.w[2] * cs.w[3] * g.oh * g.ow >= (int64_t{2} << 20);
    std::printf("| %s | %s | %s (%s) | %s | %s | %s |\n", cs.label.c_str(), Cell(ms32, 3).c_str(),
                Cell(ms16, 3).c_str(), gemm_path ? "bf16 GEMM" : "widened", Cell(ms_dnnl, 3).c_str(),
                Ratio(ms16, ms_dnnl).c_str(), cpu::onednn::bf16_conv2d_impl(g, true).c_str());
    std::fflush(stdout);
  }
}

// All threads: the ways a bf16 product can use the pool, interleaved round by round (the
// machine's speed drifts between runs, so the strategies are timed in alternation and each
// figure is the median of 9 rounds), GFLOP/s. The row split is how every other product
// splits: each thread runs a one-thread kernel on its half of A's rows into float32, then
// rounds to bfloat16. oneDNN's one call splits the product itself over its OpenMP threads and
// writes bfloat16 (onednn::bf16_matmul_rounded).
void Bf16SplitTable() {
  const int threads = get_num_threads();
  std::printf(
      "\n### bf16 products on %d threads: row halves against one oneDNN call, GFLOP/s (median of 9 "
      "interleaved rounds)\n\n",
      threads);
  std::string why;
  if (!cpu::onednn::bf16_available(&why)) {
    std::printf("oneDNN bf16 primitives not available here: %s\n", why.c_str());
    return;
  }
  std::printf(
      "| product (m x n x k) | rows split, Anvil %s | rows split, oneDNN 1-thread calls | oneDNN one call, %d "
      "threads, bf16 out | oneDNN one call, 1 thread, bf16 out | one call / best row split |\n"
      "|---|---:|---:|---:|---:|---:|\n",
      cpu::bf16_gemm_kernel_name(), threads);
  const std::vector<Bf16Product> products = {
      {"1024^3", 1024, 1024, 1024, false, false},
      {"2048^3", 2048, 2048, 2048, false, false},
      {"MLP fwd x W1^T", 256, 1024, 784, false, true},
      {"MLP fwd h W2^T", 256, 1024, 1024, false, true},
      {"MLP bwd grad_x = g W2", 256, 1024, 1024, false, false},
      {"MLP bwd grad_W = g^T h", 1024, 1024, 256, true, false},
  };
  for (const Bf16Product& p : products) {
    const Bf16Operands o(p);
    const uint16_t *pa = o.pa, *pb = o.pb;
    const int64_t a_rs = o.a_rs, a_cs = o.a_cs, b_rs = o.b_rs, b_cs = o.b_cs;
    std::vector<float> acc(static_cast<size_t>(p.m * p.n));
    std::vector<uint16_t> c(static_cast<size_t>(p.m * p.n));
    const double flop = o.flop;
    const int64_t step = (p.m + threads - 1) / threads;
    const auto row_split = [&](cpu::Bf16GemmCandidate cand) {
      parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t r0 = t * step, r1 = std::min(p.m, r0 + step);
          if (r0 >= r1) continue;
          cpu::bf16_gemm_with(cand, r1 - r0, p.n, p.k, pa + r0 * a_rs, a_rs, a_cs, pb, b_rs, b_cs, 0.0f,
                              acc.data() + r0 * p.n, p.n);
          cpu::float_to_bf16(acc.data() + r0 * p.n, c.data() + r0 * p.n, (r1 - r0) * p.n);
        }
      });
    };
    const std::vector<std::function<void()>> ways = {
        [&] { row_split(cpu::Bf16GemmCandidate::kAnvil); },
        [&] { row_split(cpu::Bf16GemmCandidate::kOneDnn); },
        [&] {
          cpu::onednn::bf16_matmul_rounded(p.m, p.n, p.k, pa, a_rs, a_cs, pb, b_rs, b_cs, nullptr, false, c.data(), p.n,
                                           threads);
        },
        [&] {
          cpu::onednn::bf16_matmul_rounded(p.m, p.n, p.k, pa, a_rs, a_cs, pb, b_rs, b_cs, nullptr, false, c.data(), p.n,
                                           1);
        },
    };
    std::vector<int> calls;
    for (const auto& w : ways) {
      w();
      const double t0 = Now();
      w();
      calls.push_back(std::max(1, static_cast<int>(0.05 / std::max(Now() - t0, 1e-6))));
    }
    std::vector<std::vector<double>> secs(ways.size());
    for (int round = 0; round < 9; ++round) {
      for (size_t i = 0; i < ways.size(); ++i) {
        const double t0 = Now();
        for (int j = 0; j < calls[i]; ++j) ways[i]();
        secs[i].push_back((Now() - t0) / calls[i]);
      }
    }
    std::vector<double> gflops;
    for (auto& v : secs) {
      std::sort(v.begin(), v.end());
      gflops.push_back(flop / v[4] / 1e9);
    }
    std::printf("| %s (%lldx%lldx%lld) | %s | %s | %s | %s | %s |\n", p.label.c_str(), static_cast<long long>(p.m),
                static_cast<long long>(p.n), static_cast<long long>(p.k), Cell(gflops[0], 1).c_str(),
                Cell(gflops[1], 1).c_str(), Cell(gflops[2], 1).c_str(), Cell(gflops[3], 1).c_str(),
                Ratio(gflops[2], std::max(gflops[0], gflops[1])).c_str());
    std::fflush(stdout);
  }
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

  if (only == "onednn" || only == "onednn-gemm") {
    // The convolution table's "Anvil bf16" column is Anvil's own path: the op would otherwise
    // take oneDNN itself where conv_bf16.cc prefers it. Set before the first bfloat16 product,
    // which reads it; the oneDNN columns call the primitives directly.
    setenv("ANVIL_BF16_GEMM", "anvil", 1);
  }
  if (only == "onednn") {
    // The candidates' tables alone, one thread (the per-call comparison the choice rests on).
    set_num_threads(1);
    OneDnnBf16GemmTable();
    OneDnnConvTable();
    return 0;
  }
  if (only == "split") {
    Bf16SplitTable();
    return 0;
  }
  if (only == "onednn-gemm") {
    set_num_threads(1);
    OneDnnBf16GemmTable();
    return 0;
  }
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
