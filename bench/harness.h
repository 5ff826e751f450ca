// The timing harness of the benchmark programs: interleaved rounds (A B, B A, ...) of
// batches that start from a quiet process, medians, and the markdown table. See the
// comment at the top of ops_bench.cc for the method and why each step is there.
#pragma once

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/backend/cpu/blas_library.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/tensor/tensor.h"

#ifdef ANVIL_BENCH_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace anvil::bench {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Options {
  int threads = 2;
  int rounds = 9;
  double batch_ms = 20.0;
  std::string filter;
};

// One peer's side of a row.
struct Side {
  std::function<void()> run;    // one call of the op; empty when the peer is absent
  std::function<void()> enter;  // optional, untimed, before each batch
  std::function<void()> leave;  // optional, untimed, after each batch
};

struct Case {
  std::string op;
  std::string size;
  Side anvil;
  Side torch;
  // Runs after timing; returns "" when the peers' results agree, else what differs.
  std::function<std::string()> check;
  // Multiplies the per-call time before printing (loops timed on a subset of the points
  // are reported extrapolated to the full set).
  double scale = 1.0;
};

struct SideResult {
  double ms = kNaN;  // median per call, already scaled
  std::string error;
};

struct Row {
  std::string op, size;
  SideResult anvil, torch;
  std::string mismatch;
};

inline const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `f`, turning an exception (Anvil's and c10's both derive from std::exception) into
// a message, so that one broken op costs its row and not the whole run.
inline bool Guarded(const std::function<void()>& f, std::string* error) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
  } catch (...) {
    *error = "unknown exception";
  }
  // Keep the table readable: the first line of the message is enough.
  const size_t nl = error->find('\n');
  if (nl != std::string::npos) error->resize(nl);
  return false;
}

inline double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Waits until no thread of this process burns CPU. Thread pools spin for a while after
// their work before they sleep — OpenBLAS's workers for ~100 ms, OpenMP's for a few ms —
// and on 2 cores a spinning pool of one peer would take a core from the other peer's
// next batch. Every batch therefore starts from a quiet process.
inline void Quiesce() {
  constexpr auto kProbe = std::chrono::milliseconds(5);
  for (int i = 0; i < 200; ++i) {  // gives up after about a second
    const double cpu0 = ProcessCpuMs();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(kProbe);
    const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (ProcessCpuMs() - cpu0 < 0.1 * wall) return;
  }
}

// Per-call milliseconds of `calls` back-to-back calls.
inline double TimeBatch(const Side& side, int calls) {
  Quiesce();
  if (side.enter) side.enter();
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) side.run();
  const auto t1 = Clock::now();
  if (side.leave) side.leave();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / calls;
}

// Measures both sides of `c`, interleaved.
inline Row Measure(const Case& c, const Options& opt) {
  struct State {
    const Side* side;
    SideResult* result;
    bool live;
    int calls = 1;
    std::vector<double> samples;
  };
  Row row{c.op, c.size, {}, {}, {}};
  State states[2] = {{&c.anvil, &row.anvil, static_cast<bool>(c.anvil.run)},
                     {&c.torch, &row.torch, static_cast<bool>(c.torch.run)}};

  // Warm-up and calibration: one call to touch memory and start pools, then one timed
  // call to size the batches, then one whole batch untimed.
  for (State& s : states) {
    if (!s.live) continue;
    double once = 0;
    s.live = Guarded(
        [&] {
          TimeBatch(*s.side, 1);
          once = TimeBatch(*s.side, 1);
          s.calls = static_cast<int>(std::clamp(std::ceil(opt.batch_ms / std::max(once, 1e-6)), 1.0, 100000.0));
          TimeBatch(*s.side, s.calls);
        },
        &s.result->error);
  }
  for (int r = 0; r < opt.rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      State& s = states[(r + k) % 2];  // A B, then B A, ...
      if (!s.live) continue;
      s.live = Guarded([&] { s.samples.push_back(TimeBatch(*s.side, s.calls)); }, &s.result->error);
    }
  }
  for (State& s : states) {
    if (s.live) s.result->ms = Median(s.samples) * c.scale;
  }
  if (c.check && states[0].live && states[1].live) {
    std::string error;
    if (!Guarded([&] { row.mismatch = c.check(); }, &error)) row.mismatch = "check: " + error;
  }
  return row;
}

// Milliseconds with about three significant digits and no exponent.
inline std::string FormatMs(double ms) {
  if (std::isnan(ms)) return "n/a";
  char buf[64];
  if (ms >= 100) {
    std::snprintf(buf, sizeof(buf), "%.0f", ms);
  } else if (ms >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f", ms);
  } else {
    const int decimals = std::min(9, 2 - static_cast<int>(std::floor(std::log10(ms))));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, ms);
  }
  return buf;
}

inline std::string FormatRatio(double a, double t) {
  if (std::isnan(a) || std::isnan(t) || t <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", a / t);
  return buf;
}

// "CPU ..., ISA avx512, GEMM onednn (oneDNN 2.6.3), 2 threads" and OpenBLAS's core (what
// libtorch 1.13 runs its products on).
inline std::string KernelLine() {
  return "- kernels: " + anvil::cpu_kernel_summary() + "\n- OpenBLAS core: " + anvil::cpu::blas::openblas().core +
         " (" + anvil::cpu::blas::openblas().core_source + ")";
}

// PyTorch 2.x, the peer in Python: $ANVIL_BENCH_PYTHON, else the bench venv's interpreter
// (`make bench-peers`). Empty when neither is there: the peer's columns then read n/a.
inline std::string PyTorch2Python() {
  const char* env = std::getenv("ANVIL_BENCH_PYTHON");
  std::string python = env != nullptr && *env != '\0' ? env : "";
#ifdef ANVIL_BENCH_VENV_PYTHON
  if (python.empty()) python = ANVIL_BENCH_VENV_PYTHON;
#endif
  return !python.empty() && access(python.c_str(), X_OK) == 0 ? python : "";
}

// What a peer script printed: "version\t<v>", then "row\t<op>\t<size>\t<ms>" per row.
struct PeerRun {
  std::string version = "2.x";
  std::map<std::pair<std::string, std::string>, double> ms;  // (op, size) -> median ms per call
  double Get(const std::string& op, const std::string& size) const {
    const auto it = ms.find({op, size});
    return it == ms.end() ? kNaN : it->second;
  }
};

// The lines a command prints on stdout, each split at its tabs (the peers' protocol).
inline std::vector<std::vector<std::string>> RunLines(const std::string& cmd) {
  std::vector<std::vector<std::string>> lines;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return lines;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) {
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    std::vector<std::string> fields;
    for (size_t start = 0;;) {
      const size_t tab = line.find('\t', start);
      fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    lines.push_back(std::move(fields));
  }
  pclose(p);
  return lines;
}

inline PeerRun RunPeerScript(const std::string& script, const std::string& args) {
  PeerRun run;
  const std::string python = PyTorch2Python();
  if (python.empty()) return run;
  for (const auto& f : RunLines(python + " " + script + " " + args + " 2>/dev/null")) {
    if (f.size() == 2 && f[0] == "version") run.version = f[1];
    if (f.size() == 4 && f[0] == "row") run.ms[{f[1], f[2]}] = std::atof(f[3].c_str());
  }
  return run;
}

class Table {
 public:
  explicit Table(const Options& opt) : opt_(opt) {}

  void PrintHeader() const {
    // Every table names the CPU, the ISA level and the GEMM kernel it was measured with.
    std::printf("%s\n\n", KernelLine().c_str());
    std::printf("| op | size | anvil ms | libtorch ms | ratio (anvil/libtorch) |\n");
    std::printf("|---|---|---:|---:|---:|\n");
    std::fflush(stdout);
  }

  // Measures and prints one row now (so a slow or hanging row shows where it is), and
  // keeps it for the notes below the table.
  const Row& Run(const Case& c) {
    rows_.push_back(Measure(c, opt_));
    const Row& r = rows_.back();
    std::string a = r.anvil.error.empty() ? FormatMs(r.anvil.ms) : "error";
    std::string t = r.torch.error.empty() ? FormatMs(r.torch.ms) : "error";
    if (!r.mismatch.empty()) a += " (!)";
    std::printf("| %s | %s | %s | %s | %s |\n", r.op.c_str(), r.size.c_str(), a.c_str(), t.c_str(),
                FormatRatio(r.anvil.ms, r.torch.ms).c_str());
    std::fflush(stdout);
    return r;
  }

  bool Wanted(const std::string& op) const { return opt_.filter.empty() || op.find(opt_.filter) != std::string::npos; }

  void AddNote(std::string note) { notes_.push_back(std::move(note)); }

  const std::vector<Row>& rows() const { return rows_; }

  void PrintNotes() const {
    std::vector<std::string> lines;
    for (const Row& r : rows_) {
      if (!r.anvil.error.empty()) {
        lines.push_back("ERROR anvil, " + r.op + " " + r.size + ": " + r.anvil.error);
      }
      if (!r.torch.error.empty()) {
        lines.push_back("ERROR libtorch, " + r.op + " " + r.size + ": " + r.torch.error);
      }
      if (!r.mismatch.empty()) {
        lines.push_back("MISMATCH (!) " + r.op + " " + r.size + ": " + r.mismatch);
      }
    }
    lines.insert(lines.end(), notes_.begin(), notes_.end());
    if (lines.empty()) return;
    std::printf("\n");
    for (const std::string& l : lines) std::printf("- %s\n", l.c_str());
    std::fflush(stdout);
  }

 private:
  const Options& opt_;
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
};

inline std::string Fixed(double v, int decimals) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

// Options from the command line ([threads] [filter]) and the environment
// (ANVIL_BENCH_THREADS, ANVIL_BENCH_ROUNDS, ANVIL_BENCH_BATCH_MS).
inline Options ParseOptions(int argc, char** argv) {
  Options opt;
  opt.threads = std::atoi(EnvOr("ANVIL_BENCH_THREADS", "2"));
  if (argc > 1) opt.threads = std::atoi(argv[1]);
  if (argc > 2) opt.filter = argv[2];
  opt.rounds = std::max(1, std::atoi(EnvOr("ANVIL_BENCH_ROUNDS", "9")));
  opt.batch_ms = std::max(0.0, std::atof(EnvOr("ANVIL_BENCH_BATCH_MS", "20")));
  return opt;
}

#ifdef ANVIL_BENCH_HAVE_TORCH
// A libtorch copy of an Anvil tensor (float32 or int64), so both peers see the same data.
inline torch::Tensor ToTorch(const anvil::Tensor& a) {
  const anvil::Tensor c = a.contiguous();
  torch::Dtype dtype;
  if (c.dtype() == anvil::kFloat32) {
    dtype = torch::kFloat;
  } else if (c.dtype() == anvil::kInt64) {
    dtype = torch::kLong;
  } else {
    throw std::runtime_error("ToTorch: only float32 and int64 are needed here");
  }
  const std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(c.data_ptr(), sizes, torch::TensorOptions().dtype(dtype)).clone();
}
#endif

}  // namespace anvil::bench
