// Anvil's forward against onnxruntime on the file Anvil exports (docs/onnx.md): the digits MLP
// and CNN presets at batch 1 (overhead-bound) and 64, in process on both sides, same thread
// count. onnxruntime runs through its Python API (bench/onnx_peer.py), whose call adds a few
// microseconds; its interpreter is $ANVIL_BENCH_ORT_PYTHON, else the tests' .venv (`make
// peers`). Ratio = Anvil / onnxruntime: below 1.0 Anvil is faster.
//
// Then the same models in int8 (static: fused, calibrated on random batches, converted):
// Anvil's int8 forward against onnxruntime on the QDQ file Anvil exports of it, which
// onnxruntime's default optimization level fuses into QLinearConv / QGemm.
//   anvil_bench_onnx [THREADS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "core/anvil.h"
#include "core/backend/cpu/int8_gemm.h"
#include "core/models/spec.h"
#include "core/onnx/export.h"
#include "core/quant/quantize.h"

namespace {

using namespace anvil;

// Median ms per forward over 9 rounds of ~20 ms, after a warm-up.
double TimeForward(nn::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  for (int i = 0; i < 50; ++i) m.forward(x);
  using Clock = std::chrono::steady_clock;
  int calls = 0;
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::milliseconds(20)) {
    m.forward(x);
    ++calls;
  }
  std::vector<double> rounds;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) m.forward(x);
    rounds.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[4];
}

// Static int8 in place: fuse, calibrate on 4 random batches of 64 (timing only: the weights
// are untrained), convert.
void QuantizeStatic(nn::Module& m, const IntArray& sample) {
  quant::fuse_modules(m);
  quant::QConfig q;
  q.activation = quant::ActivationObserver::kMinMax;
  quant::prepare(m, q);
  NoGradGuard no_grad;
  IntArray shape{64};
  shape.insert(shape.end(), sample.begin(), sample.end());
  for (int i = 0; i < 4; ++i) m.forward(randn(shape));
  quant::convert(m);
  m.eval();
}

std::string OrtPython() {
  const char* env = std::getenv("ANVIL_BENCH_ORT_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : ANVIL_BENCH_ORT_VENV_PYTHON;
  return access(python.c_str(), X_OK) == 0 ? python : "";
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  set_num_threads(threads);
  const std::string python = OrtPython();
  const std::string dir = std::filesystem::temp_directory_path() / "anvil-bench-onnx";
  std::filesystem::create_directories(dir);
  std::map<std::pair<std::string, std::string>, double> ort;
  std::string version = "n/a";
  struct Model {
    std::string label, spec;
    double anvil_ms[2];
    double int8_ms[2];
  };
  std::vector<Model> models{{"digits MLP", models::preset_spec("mlp", {1, 8, 8}, 10), {}, {}},
                            {"digits CNN", models::preset_spec("lenet5", {1, 8, 8}, 10), {}, {}}};
  const int64_t batches[2] = {1, 64};
  for (Model& m : models) {
    models::BuiltModel built = models::build_model(m.spec);
    built.module->eval();
    const std::string path = dir + "/" + (m.label == "digits MLP" ? "mlp" : "cnn") + ".onnx";
    const std::string bytes = onnx::export_model(*built.module, {{"input", built.input_shape, kFloat32}}, {});
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (int b = 0; b < 2; ++b) m.anvil_ms[b] = TimeForward(*built.module, randn({batches[b], 1, 8, 8}));
    if (python.empty()) continue;
    // The int8 model and its QDQ file.
    QuantizeStatic(*built.module, built.input_shape);
    const std::string qpath = dir + "/" + (m.label == "digits MLP" ? "mlp" : "cnn") + "-int8.onnx";
    const std::string qbytes = onnx::export_model(*built.module, {{"input", built.input_shape, kFloat32}}, {});
    std::ofstream(qpath, std::ios::binary).write(qbytes.data(), static_cast<std::streamsize>(qbytes.size()));
    for (int b = 0; b < 2; ++b) m.int8_ms[b] = TimeForward(*built.module, randn({batches[b], 1, 8, 8}));
    if (python.empty()) continue;
    for (const auto& [file, tag] : {std::pair{path, std::string()}, std::pair{qpath, std::string(" int8")}}) {
      const std::string cmd =
          python + " " + ANVIL_BENCH_ONNX_PEER + " " + file + " " + std::to_string(threads) + " x 1 64";
      for (const auto& f : bench::RunLines(cmd + " 2>/dev/null")) {
        if (f.size() == 2 && f[0] == "version") version = f[1];
        if (f.size() == 4 && f[0] == "row") ort[{m.label + tag, f[2]}] = std::atof(f[3].c_str());
      }
    }
  }
  std::printf("# Forward: Anvil vs onnxruntime %s on Anvil's exported file (%d threads, %s)\n\n%s\n\n", version.c_str(),
              threads, bench::CpuModel().c_str(), bench::KernelLine().c_str());
  std::printf("| model | batch | anvil ms | onnxruntime ms | ratio (anvil/onnxruntime) |\n|---|---:|---:|---:|---:|\n");
  for (const Model& m : models) {
    for (int b = 0; b < 2; ++b) {
      const auto it = ort.find({m.label, std::to_string(batches[b])});
      const double peer = it == ort.end() ? bench::kNaN : it->second;
      std::printf("| %s | %lld | %s | %s | %s |\n", m.label.c_str(), static_cast<long long>(batches[b]),
                  bench::FormatMs(m.anvil_ms[b]).c_str(), bench::FormatMs(peer).c_str(),
                  bench::FormatRatio(m.anvil_ms[b], peer).c_str());
    }
  }
  std::printf(
      "\n# int8 forward: Anvil's int8 layers (kernel %s) vs onnxruntime %s on Anvil's QDQ export of the same "
      "model\n\n"
      "| model | batch | anvil int8 ms | onnxruntime int8 ms | ratio (anvil/onnxruntime) | anvil fp32 ms | anvil "
      "int8/fp32 |\n|---|---:|---:|---:|---:|---:|---:|\n",
      cpu::int8_gemm_kernel_name(cpu::selected_int8_gemm()).c_str(), version.c_str());
  for (const Model& m : models) {
    for (int b = 0; b < 2; ++b) {
      const auto it = ort.find({m.label + " int8", std::to_string(batches[b])});
      const double peer = it == ort.end() ? bench::kNaN : it->second;
      std::printf("| %s | %lld | %s | %s | %s | %s | %s |\n", m.label.c_str(), static_cast<long long>(batches[b]),
                  bench::FormatMs(m.int8_ms[b]).c_str(), bench::FormatMs(peer).c_str(),
                  bench::FormatRatio(m.int8_ms[b], peer).c_str(), bench::FormatMs(m.anvil_ms[b]).c_str(),
                  bench::FormatRatio(m.int8_ms[b], m.anvil_ms[b]).c_str());
    }
  }
  return 0;
}
