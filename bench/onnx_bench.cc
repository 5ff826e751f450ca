// Anvil's forward against onnxruntime on the file Anvil exports (docs/onnx.md): the digits MLP
// and CNN presets at batch 1 (overhead-bound) and 64, in process on both sides, same thread
// count. onnxruntime runs through its Python API (bench/onnx_peer.py), whose call adds a few
// microseconds; its interpreter is $ANVIL_BENCH_ORT_PYTHON, else the tests' .venv (`make
// peers`). Ratio = Anvil / onnxruntime: below 1.0 Anvil is faster.
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
#include "core/models/spec.h"
#include "core/onnx/export.h"

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
  };
  std::vector<Model> models{{"digits MLP", models::preset_spec("mlp", {1, 8, 8}, 10), {}},
                            {"digits CNN", models::preset_spec("lenet5", {1, 8, 8}, 10), {}}};
  const int64_t batches[2] = {1, 64};
  for (Model& m : models) {
    models::BuiltModel built = models::build_model(m.spec);
    built.module->eval();
    const std::string path = dir + "/" + (m.label == "digits MLP" ? "mlp" : "cnn") + ".onnx";
    const std::string bytes = onnx::export_model(*built.module, {{"input", built.input_shape, kFloat32}}, {});
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (int b = 0; b < 2; ++b) m.anvil_ms[b] = TimeForward(*built.module, randn({batches[b], 1, 8, 8}));
    if (python.empty()) continue;
    const std::string cmd =
        python + " " + ANVIL_BENCH_ONNX_PEER + " " + path + " " + std::to_string(threads) + " x 1 64";
    for (const auto& f : bench::RunLines(cmd + " 2>/dev/null")) {
      if (f.size() == 2 && f[0] == "version") version = f[1];
      if (f.size() == 4 && f[0] == "row") ort[{m.label, f[2]}] = std::atof(f[3].c_str());
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
  return 0;
}
