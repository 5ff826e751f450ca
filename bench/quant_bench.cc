// int8 inference against float32 on the CPU, layers and models, Anvil beside PyTorch 2.x
// (bench/quant_peer.py, fbgemm engine, same shapes and thread counts) in one run: the speed
// part of issue 36.
//
//   anvil_bench_quant [THREADS [layers]]   THREADS: the thread counts, comma-separated (default
//                   "1,N", N the machine's); the peer is $ANVIL_BENCH_PYTHON or the bench venv's
//                   interpreter, else its columns read n/a; "layers": only the per-layer table of
//                   the digits CNN (the first thread count), no peer
//
// Rows:
// - Linear 1024 -> 1024 forward at batch 1, 32 and 256: nn::Linear in float32, QuantizedLinear
//   (static: quantize the input with the calibrated parameters, int8 GEMM, requantize to uint8,
//   dequantize: float in, float out) and DynamicQuantizedLinear (parameters from each batch's
//   range, float out). PyTorch: nn.Linear; torch.ao.nn.quantized.Linear on a quantized input
//   (quint8 in and out) and from float to float (quantize_per_tensor + layer + dequantize, the
//   same work as Anvil's layer); torch.ao.nn.quantized.dynamic.Linear.
// - The digits presets' forward (mlp on 64 features, lenet5 on 1x8x8) at batch 1 and 64:
//   float32, static int8 (fuse_modules, prepare, 8 random calibration batches, convert) and
//   dynamic int8 (quantize_dynamic: the Linears only), float in and float out on both sides.
// - The digits CNN layer by layer at batch 64, float32 and static int8: where the time goes.
// Each figure is the median of 7 batches of >= 100 ms after a warm-up, as the peer times its
// own; "x" columns are float32 time / int8 time (above 1: int8 is faster).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/harness.h"
#include "core/anvil.h"
#include "core/autograd/grad_mode.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/int8_gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/models/spec.h"
#include "core/nn/nn.h"
#include "core/quant/quantize.h"
#include "core/util/cpu_features.h"
#include "core/util/thread_pool.h"

namespace {

using namespace anvil;  // NOLINT: a benchmark program

constexpr int64_t kLinearBatches[] = {1, 32, 256};
constexpr int64_t kModelBatches[] = {1, 64};
constexpr int kCalibrationBatches = 8;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median milliseconds per call of 7 batches of >= 100 ms, after one untimed call (quant_peer.py
// times the same way).
double MsPerCall(const std::function<void()>& f) {
  f();
  const double t0 = Now();
  f();
  const double once = std::max(Now() - t0, 1e-7);
  const int calls = std::max(1, static_cast<int>(0.1 / once));
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    const double s = Now();
    for (int i = 0; i < calls; ++i) f();
    batches.push_back((Now() - s) / calls);
  }
  std::sort(batches.begin(), batches.end());
  return 1e3 * batches[3];
}

std::string Cell(double ms) { return ms > 0 ? bench::FormatMs(ms) : "n/a"; }
// float32 time over int8 time: how many times faster int8 is.
std::string Speedup(double fp32_ms, double int8_ms) {
  return fp32_ms > 0 && int8_ms > 0 ? bench::Fixed(fp32_ms / int8_ms, 2) + "x" : "n/a";
}

// The peer's figures, (threads, key) -> ms; key as quant_peer.py names it.
struct Peer {
  std::string version = "n/a", engine = "n/a";
  std::map<std::pair<int, std::string>, double> ms;
  double Get(int threads, const std::string& key) const {
    const auto it = ms.find({threads, key});
    return it == ms.end() ? 0.0 : it->second;
  }
};

Peer RunPeer(const std::vector<int>& threads) {
  Peer peer;
  const std::string python = bench::PyTorch2Python();
  if (python.empty()) return peer;
  std::string args;
  for (int t : threads) args += " " + std::to_string(t);
  for (const auto& l : bench::RunLines(python + " " + ANVIL_BENCH_QUANT_PEER + args + " 2>/dev/null")) {
    if (l.size() == 2 && l[0] == "version") peer.version = l[1];
    if (l.size() == 2 && l[0] == "engine") peer.engine = l[1];
    if (l.size() == 4 && l[0] == "row") peer.ms[{std::atoi(l[1].c_str()), l[2]}] = std::atof(l[3].c_str());
  }
  return peer;
}

// Static int8 as PyTorch's eager mode does it: fuse, observe, calibrate, convert.
void QuantizeStatic(nn::Module& model, const std::vector<Tensor>& calibration) {
  model.eval();
  quant::fuse_modules(model);
  quant::prepare(model);
  NoGradGuard g;
  for (const Tensor& batch : calibration) model.forward(batch);
  quant::convert(model);
}

std::vector<Tensor> RandomBatches(IntArray shape) {
  std::vector<Tensor> batches;
  for (int i = 0; i < kCalibrationBatches; ++i) batches.push_back(randn(shape));
  return batches;
}

// 10 log10(sum y^2 / sum (y - y_int8)^2): a check that the int8 layers compute the float ones.
double SqnrDb(const Tensor& y, const Tensor& y_int8) {
  const Tensor a = y.contiguous(), b = y_int8.contiguous();
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  double signal = 0, noise = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    signal += double(pa[i]) * pa[i];
    noise += (double(pa[i]) - pb[i]) * (double(pa[i]) - pb[i]);
  }
  return 10.0 * std::log10(signal / std::max(noise, 1e-30));
}

// The float model and its two int8 versions, built with the same weights.
struct Versions {
  std::shared_ptr<nn::Module> fp32, static_int8, dynamic_int8;
};

Versions LinearVersions() {
  auto make = [] {
    manual_seed(1);
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Linear>(1024, 1024));
    s->eval();
    return s;
  };
  Versions v{make(), make(), make()};
  QuantizeStatic(*v.static_int8, RandomBatches({256, 1024}));
  quant::quantize_dynamic(*v.dynamic_int8);
  return v;
}

Versions PresetVersions(const std::string& preset, const IntArray& input) {
  const std::string spec = models::preset_spec(preset, input, 10);
  auto make = [&] {
    manual_seed(2);
    auto m = models::build_model(spec).module;
    m->eval();
    return m;
  };
  Versions v{make(), make(), make()};
  IntArray shape = {64};
  shape.insert(shape.end(), input.begin(), input.end());
  QuantizeStatic(*v.static_int8, RandomBatches(shape));
  quant::quantize_dynamic(*v.dynamic_int8);
  return v;
}

struct Times {
  double fp32, static_int8, dynamic_int8;
};

Times TimeVersions(const Versions& v, const Tensor& x) {
  NoGradGuard g;
  return {MsPerCall([&] { (void)v.fp32->forward(x); }), MsPerCall([&] { (void)v.static_int8->forward(x); }),
          MsPerCall([&] { (void)v.dynamic_int8->forward(x); })};
}

std::vector<int> ParseThreads(int argc, char** argv) {
  std::vector<int> threads;
  if (argc > 1) {
    std::stringstream in(argv[1]);
    for (std::string item; std::getline(in, item, ',');)
      if (std::atoi(item.c_str()) > 0) threads.push_back(std::atoi(item.c_str()));
  }
  if (threads.empty()) {
    threads = {1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
    if (threads[1] == 1) threads.pop_back();
  }
  return threads;
}

void LinearTable(const std::vector<int>& threads, const Peer& peer) {
  std::printf("### Linear 1024 -> 1024 forward, ms per call (x: float32 time / int8 time)\n\n");
  std::printf(
      "| batch | threads | Anvil fp32 | Anvil static int8 | x | Anvil dynamic int8 | x | PyTorch fp32 | PyTorch static "
      "int8, quint8 in/out | x | PyTorch static int8, float in/out | x | PyTorch dynamic int8 | x | Anvil static / "
      "PyTorch static float in/out (time) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      "---:|\n");
  const Versions v = LinearVersions();
  for (int t : threads) {
    set_num_threads(t);
    for (int64_t batch : kLinearBatches) {
      manual_seed(3);
      const Times a = TimeVersions(v, randn({batch, 1024}));
      const std::string key = "linear/" + std::to_string(batch) + "/";
      const double p32 = peer.Get(t, key + "fp32"), pq = peer.Get(t, key + "static_q"),
                   pf = peer.Get(t, key + "static_f"), pd = peer.Get(t, key + "dynamic");
      std::printf("| %lld | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                  static_cast<long long>(batch), t, Cell(a.fp32).c_str(), Cell(a.static_int8).c_str(),
                  Speedup(a.fp32, a.static_int8).c_str(), Cell(a.dynamic_int8).c_str(),
                  Speedup(a.fp32, a.dynamic_int8).c_str(), Cell(p32).c_str(), Cell(pq).c_str(),
                  Speedup(p32, pq).c_str(), Cell(pf).c_str(), Speedup(p32, pf).c_str(), Cell(pd).c_str(),
                  Speedup(p32, pd).c_str(), pf > 0 ? bench::Fixed(a.static_int8 / pf, 2).c_str() : "n/a");
      std::fflush(stdout);
    }
  }
  NoGradGuard g;
  manual_seed(4);
  const Tensor x = randn({256, 1024});
  const Tensor y = v.fp32->forward(x);
  std::printf("\n- check, batch 256: SQNR against float32 %s dB (static), %s dB (dynamic)\n\n",
              bench::Fixed(SqnrDb(y, v.static_int8->forward(x)), 1).c_str(),
              bench::Fixed(SqnrDb(y, v.dynamic_int8->forward(x)), 1).c_str());
}

void ModelTable(const std::vector<int>& threads, const Peer& peer) {
  std::printf("### Digits presets forward, ms per call (x: float32 time / int8 time)\n\n");
  std::printf(
      "| model | batch | threads | Anvil fp32 | Anvil static int8 | x | Anvil dynamic int8 | x | PyTorch fp32 | "
      "PyTorch static int8 | x | PyTorch dynamic int8 | x | Anvil static / PyTorch static (time) |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  struct Model {
    std::string preset, label;
    IntArray input;
  };
  const std::vector<Model> models = {{"mlp", "MLP 64-128-128-10 (mlp preset)", {64}},
                                     {"lenet5", "digits CNN (lenet5 preset, 1x8x8)", {1, 8, 8}}};
  for (const Model& m : models) {
    const Versions v = PresetVersions(m.preset, m.input);
    for (int t : threads) {
      set_num_threads(t);
      for (int64_t batch : kModelBatches) {
        IntArray shape = {batch};
        shape.insert(shape.end(), m.input.begin(), m.input.end());
        manual_seed(5);
        const Times a = TimeVersions(v, randn(shape));
        const std::string key = m.preset + "/" + std::to_string(batch) + "/";
        const double p32 = peer.Get(t, key + "fp32"), ps = peer.Get(t, key + "static"),
                     pd = peer.Get(t, key + "dynamic");
        std::printf("| %s | %lld | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.label.c_str(),
                    static_cast<long long>(batch), t, Cell(a.fp32).c_str(), Cell(a.static_int8).c_str(),
                    Speedup(a.fp32, a.static_int8).c_str(), Cell(a.dynamic_int8).c_str(),
                    Speedup(a.fp32, a.dynamic_int8).c_str(), Cell(p32).c_str(), Cell(ps).c_str(),
                    Speedup(p32, ps).c_str(), Cell(pd).c_str(), Speedup(p32, pd).c_str(),
                    ps > 0 ? bench::Fixed(a.static_int8 / ps, 2).c_str() : "n/a");
        std::fflush(stdout);
      }
    }
  }
}

// Where the int8 CNN's time goes: each layer of the Sequential timed on its own input.
void LayerTable(int threads) {
  std::printf("\n### digits CNN at batch 64, %d thread(s): ms per layer, float32 and static int8\n\n", threads);
  std::printf("| layer | float32 | ms | static int8 | ms |\n|---:|---|---:|---|---:|\n");
  set_num_threads(threads);
  const Versions v = PresetVersions("lenet5", {1, 8, 8});
  auto fp32 = std::dynamic_pointer_cast<nn::Sequential>(v.fp32);
  auto int8 = std::dynamic_pointer_cast<nn::Sequential>(v.static_int8);
  if (fp32 == nullptr || int8 == nullptr || fp32->size() != int8->size()) return;
  NoGradGuard g;
  manual_seed(5);
  Tensor x32 = randn({64, 1, 8, 8}), x8 = x32;
  for (size_t i = 0; i < fp32->size(); ++i) {
    const auto& a = (*fp32)[i];
    const auto& b = (*int8)[i];
    const double ms32 = MsPerCall([&] { (void)a->forward(x32); });
    const double ms8 = MsPerCall([&] { (void)b->forward(x8); });
    std::printf("| %zu | %s | %s | %s | %s |\n", i, a->type_name().c_str(), Cell(ms32).c_str(), b->type_name().c_str(),
                Cell(ms8).c_str());
    x32 = a->forward(x32);
    x8 = b->forward(x8);
  }
  std::fflush(stdout);
}

// The static int8 Linear 1024 -> 1024 at batch 256 alone, called for `seconds`: a target for a
// profiler (perf record -- anvil_bench_quant 1 linear-loop).
void LinearLoop(int threads, double seconds) {
  set_num_threads(threads);
  const Versions v = LinearVersions();
  manual_seed(3);
  const Tensor x = randn({256, 1024});
  NoGradGuard g;
  int64_t calls = 0;
  const double start = Now();
  while (Now() - start < seconds) {
    (void)v.static_int8->forward(x);
    ++calls;
  }
  std::printf("static int8 Linear 1024 -> 1024, batch 256, %d thread(s): %s ms per call over %lld calls\n", threads,
              Cell((Now() - start) * 1e3 / static_cast<double>(calls)).c_str(), static_cast<long long>(calls));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> threads = ParseThreads(argc, argv);
  if (argc > 2 && std::string(argv[2]) == "layers") {
    LayerTable(threads.front());
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "linear-loop") {
    LinearLoop(threads.front(), 5.0);
    return 0;
  }
  const CpuFeatures& f = cpu_features();
  std::printf("CPU: %s (%s family %d model %d); ISA level %s (detected %s)\n", f.model_name.c_str(), f.vendor.c_str(),
              f.family, f.model, std::string(isa_name(cpu::active_isa())).c_str(),
              std::string(isa_name(detected_isa())).c_str());
  std::printf("%s\n", bench::KernelLine().c_str());
  std::printf("- int8 GEMM: %s; float32 GEMM for the Linear at batch 256: %s\n",
              cpu::int8_gemm_kernel_name(cpu::selected_int8_gemm()).c_str(),
              cpu::gemm_kernel_name(cpu::gemm_kernel_for(256, 1024, 1024)).c_str());
  const Peer peer = RunPeer(threads);
  std::printf("- peer: PyTorch %s, quantized engine %s\n\n", peer.version.c_str(), peer.engine.c_str());
  std::fflush(stdout);
  LinearTable(threads, peer);
  ModelTable(threads, peer);
  LayerTable(threads.front());
  return 0;
}
