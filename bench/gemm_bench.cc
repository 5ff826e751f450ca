// Float32 GEMM candidates (core/backend/cpu/gemm.h) at each ISA level this CPU has, beside
// PyTorch 2.x's torch.mm (MKL) on the same shapes, one thread each: the measurements behind
// the per-level order of preference in core/backend/cpu/gemm.cc.
//
//   anvil_bench_gemm [PYTHON]   PYTHON: an interpreter with torch (default: the bench venv,
//                               $ANVIL_BENCH_PYTHON, else "n/a" in the peer column)
//
// Each level runs in a child process started with ANVIL_CPU_ISA=<level>, because OpenBLAS and
// BLIS choose their kernels once, when loaded. Shapes: square products and the products of a
// training step (a Linear layer's forward x W^T, its input gradient dY W and its weight
// gradient dY^T X). Each figure is the best of 5 timed batches of >= 50 ms; every result is
// checked against a float64 product (max relative error in the last column).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/util/cpu_features.h"
#include "core/util/thread_pool.h"

namespace {

using anvil::cpu::GemmKernel;

struct Shape {
  const char* name;
  int64_t m, n, k;
  bool ta, tb;
};

const Shape kShapes[] = {
    {"square 256", 256, 256, 256, false, false},
    {"square 512", 512, 512, 512, false, false},
    {"square 1024", 1024, 1024, 1024, false, false},
    {"MLP 256x128 x W^T[128x128]", 256, 128, 128, false, true},
    {"784-256 fwd: x[128x784] W^T", 128, 256, 784, false, true},
    {"784-256 dX: dY[128x256] W", 128, 784, 256, false, false},
    {"784-256 dW: dY^T X[128x784]", 256, 784, 128, true, false},
    {"1024-1024 fwd: x[256x1024] W^T", 256, 1024, 1024, false, true},
    {"half batch 64: x[32x128] W^T", 32, 128, 128, false, true},
    {"head: x[128x128] W^T[10x128]", 128, 10, 128, false, true},
    {"conv columns: W[16x150] cols", 16, 576, 150, false, false},
    {"LeNet fc1 dW: dY^T X[64x400]", 120, 400, 64, true, false},
    {"LeNet fc3: x[32x84] W^T[10x84]", 32, 10, 84, false, true},
    // The rest of a LeNet-5 step at batch 64 split over two threads (32 rows each): the
    // products where a library's fixed cost per call shows.
    {"LeNet fc2: x[32x120] W^T[84x120]", 32, 84, 120, false, true},
    {"LeNet fc3 dX: dY[32x10] W[10x84]", 32, 84, 10, false, false},
    {"LeNet fc3 dW: dY^T X[32x84]", 10, 84, 32, true, false},
    {"LeNet conv1 columns: W[6x25] cols", 6, 784, 25, false, false},
    {"LeNet conv2 columns: W[16x150] cols", 16, 100, 150, false, false},
    {"head, half batch 64: x[32x128] W^T[10x128]", 32, 10, 128, false, true},
};

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Result {
  double gflops = 0;
  double max_rel_err = 0;
};

// One candidate, or the automatic choice (nullopt).
Result Measure(std::optional<GemmKernel> kernel, const Shape& s) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
      c(static_cast<size_t>(s.m * s.n));
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const auto A = [&](int64_t i, int64_t p) { return s.ta ? a[p * s.m + i] : a[i * s.k + p]; };
  const auto B = [&](int64_t p, int64_t j) { return s.tb ? b[j * s.k + p] : b[p * s.n + j]; };
  const auto run = [&] {
    if (kernel) {
      anvil::cpu::sgemm_with(*kernel, s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
    } else {
      anvil::cpu::sgemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
    }
  };
  run();
  Result r;
  // Float64 reference on a sample of entries (every entry of the small shapes).
  const int64_t stride = std::max<int64_t>(1, s.m * s.n / 4096);
  for (int64_t e = 0; e < s.m * s.n; e += stride) {
    const int64_t i = e / s.n, j = e % s.n;
    double ref = 0, mag = 0;
    for (int64_t p = 0; p < s.k; ++p) {
      ref += double(A(i, p)) * double(B(p, j));
      mag += std::fabs(double(A(i, p)) * double(B(p, j)));
    }
    r.max_rel_err = std::max(r.max_rel_err, std::fabs(c[e] - ref) / std::max(mag, 1e-30));
  }
  const double flop = 2.0 * double(s.m) * double(s.n) * double(s.k);
  const int reps = std::max(1, static_cast<int>(0.05 / (flop / 100e9)));
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const double t0 = Now();
    for (int i = 0; i < reps; ++i) run();
    best = std::min(best, (Now() - t0) / reps);
  }
  r.gflops = flop / best / 1e9;
  return r;
}

// Child: one level's rows as tab-separated lines.
int Child() {
  anvil::set_num_threads(1);
  const std::string level(anvil::isa_name(anvil::cpu::active_isa()));
  std::printf("selected\t%s\t%s\n", level.c_str(), anvil::cpu::selected_gemm_description().c_str());
  // The automatic choice per shape (sgemm: the kernel gemm.cc picks for that size).
  for (const Shape& s : kShapes) {
    const Result r = Measure(std::nullopt, s);
    std::printf("auto\t%s\t%s\t%.1f\t%s\n", level.c_str(), s.name, r.gflops,
                anvil::cpu::gemm_kernel_name(anvil::cpu::gemm_kernel_for(s.m, s.n, s.k)).c_str());
    std::fflush(stdout);
  }
  for (const anvil::cpu::GemmCandidate& c : anvil::cpu::gemm_candidates()) {
    std::printf("candidate\t%s\t%s\t%d\t%s\t%s\n", level.c_str(), c.name.c_str(), c.available ? 1 : 0,
                std::string(anvil::isa_name(c.isa)).c_str(), c.detail.c_str());
    if (!c.available) continue;
    for (const Shape& s : kShapes) {
      const Result r = Measure(c.kernel, s);
      std::printf("row\t%s\t%s\t%s\t%.1f\t%.1e\n", level.c_str(), c.name.c_str(), s.name, r.gflops, r.max_rel_err);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") return Child();
  const std::string python = argc > 1 ? std::string(argv[1]) : anvil::bench::PyTorch2Python();
  const std::string self = "/proc/self/exe";
  char exe[4096] = {};
  const ssize_t len = readlink(self.c_str(), exe, sizeof(exe) - 1);
  const std::string me = len > 0 ? std::string(exe, static_cast<size_t>(len)) : argv[0];

  const anvil::CpuFeatures& f = anvil::cpu_features();
  std::printf("CPU: %s (%s family %d model %d); features: %s; detected ISA level: %s\n", f.model_name.c_str(),
              f.vendor.c_str(), f.family, f.model, f.flags().c_str(),
              std::string(anvil::isa_name(anvil::detected_isa())).c_str());
  std::printf("OPENBLAS_CORETYPE=%s; one thread per product; GFLOP/s, best of 5 batches\n\n",
              std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)");

  // PyTorch 2.x (its own MKL sgemm), same shapes, one thread.
  std::map<std::string, std::string> peer;
  std::string peer_version = "n/a";
  if (!python.empty() && access(python.c_str(), X_OK) == 0) {
    // The shapes go to the script in a file (one "name\tm\tn\tk\tta\ttb" line each), so this
    // list is the only one.
    char path[] = "/tmp/anvil-gemm-shapes-XXXXXX";
    const int fd = mkstemp(path);
    if (FILE* f = fd >= 0 ? fdopen(fd, "w") : nullptr) {
      for (const Shape& s : kShapes) {
        std::fprintf(f, "%s\t%lld\t%lld\t%lld\t%d\t%d\n", s.name, static_cast<long long>(s.m),
                     static_cast<long long>(s.n), static_cast<long long>(s.k), s.ta ? 1 : 0, s.tb ? 1 : 0);
      }
      std::fclose(f);
    }
    for (const auto& l : anvil::bench::RunLines(python + " " + ANVIL_BENCH_GEMM_PEER + " " + path + " 2>/dev/null")) {
      if (l.size() >= 2 && l[0] == "version") peer_version = l[1];
      if (l.size() >= 3 && l[0] == "row") peer[l[1]] = l[2];
    }
    unlink(path);
  }

  const anvil::CpuIsa detected = anvil::detected_isa();
  for (int lv = static_cast<int>(detected); lv >= 0; --lv) {
    const std::string level(anvil::isa_name(static_cast<anvil::CpuIsa>(lv)));
    const auto lines = anvil::bench::RunLines("ANVIL_CPU_ISA=" + level + " ANVIL_LOG_LEVEL=warning " + me + " --child");
    std::vector<std::string> names;
    std::map<std::string, std::map<std::string, std::pair<std::string, std::string>>> cells;  // shape -> kernel
    std::map<std::string, std::pair<std::string, std::string>> automatic;  // shape -> GFLOP/s, kernel
    std::string selected;
    std::printf("### ISA level %s\n\n", level.c_str());
    for (const auto& l : lines) {
      if (l.size() >= 3 && l[0] == "selected") selected = l[2];
      if (l.size() >= 6 && l[0] == "candidate") {
        std::printf("- %s: %s (kernels at %s; %s)\n", l[2].c_str(), l[3] == "1" ? "available" : "not available",
                    l[4].c_str(), l[5].c_str());
        if (l[3] == "1") names.push_back(l[2]);
      }
      if (l.size() >= 6 && l[0] == "row") cells[l[3]][l[2]] = {l[4], l[5]};
      if (l.size() >= 5 && l[0] == "auto") automatic[l[2]] = {l[3], l[4]};
    }
    std::printf("- selected at this level: **%s**\n\n| shape (m x n x k) |", selected.c_str());
    for (const auto& n : names) std::printf(" %s |", n.c_str());
    std::printf(" PyTorch %s | selected (sgemm) | selected / best | max rel. error |\n|---|", peer_version.c_str());
    for (size_t i = 0; i < names.size() + 4; ++i) std::printf("---|");
    std::printf("\n");
    for (const Shape& s : kShapes) {
      std::printf("| %s (%lldx%lldx%lld) |", s.name, static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k));
      double best = 0, err = 0;
      for (const auto& n : names) {
        const auto it = cells[s.name].find(n);
        if (it == cells[s.name].end()) {
          std::printf(" - |");
          continue;
        }
        const double g = std::atof(it->second.first.c_str());
        best = std::max(best, g);
        err = std::max(err, std::atof(it->second.second.c_str()));
        std::printf(" %s |", it->second.first.c_str());
      }
      const auto p = peer.find(s.name);
      const auto a = automatic.find(s.name);
      const double sel = a == automatic.end() ? 0.0 : std::atof(a->second.first.c_str());
      const std::string sel_cell = a == automatic.end() ? "-" : a->second.first + " " + a->second.second;
      std::printf(" %s | %s | %.2f | %.1e |\n", p == peer.end() ? "n/a" : p->second.c_str(), sel_cell.c_str(),
                  best > 0 ? sel / best : 0.0, err);
    }
    std::printf("\n");
  }
  return 0;
}
