// Times Anvil's CPU ops against libtorch's in one process and prints a markdown table:
//   op | size | anvil ms | libtorch ms | ratio (anvil/libtorch)
//
// Usage: anvil_bench_ops [threads] [filter]
//   threads  intra-op threads for both peers (default: $ANVIL_BENCH_THREADS, else 2)
//   filter   run only rows whose op name contains this substring
// Environment: ANVIL_BENCH_ROUNDS (timed rounds per row, default 9),
//              ANVIL_BENCH_BATCH_MS (minimum length of one timed batch, default 20).
//
// Method. Both peers get the same inputs (made by Anvil, copied into libtorch) and the
// same thread count. Each row is warmed up first (first-touch page faults, pool start-up
// and allocator caches are not what a steady-state loop pays), then timed in rounds that
// alternate the peers (A B, B A, ...) so that drift in the machine's speed — the shared
// 2-core hosts vary by ±20 % — hits both columns alike. A round times a batch of calls
// that lasts at least ANVIL_BENCH_BATCH_MS, so the clock's resolution and a thread pool's
// wake-up are amortised, and starts once the process is quiet (see Quiesce); the reported
// figure is the median per-call time over the rounds.
// After timing, each row's last results are compared between the peers; a row whose
// results disagree is flagged, because a fast wrong answer is not a result.
//
// Built without libtorch (ANVIL_BENCH_HAVE_TORCH undefined), the peer column reads n/a.
// PyTorch 2.x (the bench venv's, or $ANVIL_BENCH_PYTHON) then runs the same rows through
// bench/ops_peer.py, and a second table puts its times beside both.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/harness.h"
#include "core/anvil.h"
#include "core/nn/pooling.h"

#ifdef ANVIL_BENCH_HAVE_TORCH
#include <torch/torch.h>
#endif

// OpenBLAS's thread-count controls. Declared here rather than through cblas.h so this file
// needs no BLAS include path; the symbols come from the libopenblas that both peers share.
extern "C" {
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);
}

namespace {

using namespace anvil::bench;

#ifdef ANVIL_BENCH_HAVE_TORCH

// "" when the results agree within the tolerances, else the largest difference.
std::string Compare(const anvil::Tensor& a, const torch::Tensor& t, double rtol, double atol) {
  if (!a.defined() || !t.defined()) return "a result is missing";
  const torch::Tensor mine = ToTorch(a);
  if (mine.sizes() != t.sizes()) {
    const anvil::IntArray ts(t.sizes().begin(), t.sizes().end());
    return "shape " + anvil::shape_str(a.sizes()) + " vs libtorch's " + anvil::shape_str(ts);
  }
  const torch::Tensor theirs = t.detach().to(mine.scalar_type());
  if (torch::allclose(mine, theirs, rtol, atol, /*equal_nan=*/true)) return "";
  const double diff = (mine - theirs).abs().max().item<double>();
  return "max |anvil - libtorch| = " + std::to_string(diff);
}

// Gives libtorch's sgemm the same number of threads as Anvil's kernels for one batch.
// libtorch hands GEMM to OpenBLAS and never sizes OpenBLAS's own pool, so under the
// benchmark's OPENBLAS_NUM_THREADS=1 its sgemm would otherwise run on one core. The count
// is restored afterwards, whatever Anvil had set it to.
void ShareBlasThreads(Side* side, int threads) {
  auto saved = std::make_shared<int>(1);
  side->enter = [saved, threads] {
    *saved = openblas_get_num_threads();
    openblas_set_num_threads(threads);
  };
  side->leave = [saved] { openblas_set_num_threads(*saved); };
}

#endif  // ANVIL_BENCH_HAVE_TORCH

// The libtorch side of a row, written inline at the call site and compiled only when
// libtorch is there (a lambda naming torch:: cannot be written otherwise).
#ifdef ANVIL_BENCH_HAVE_TORCH
using PeerFn = std::function<torch::Tensor()>;
#define ANVIL_BENCH_PEER(...) __VA_ARGS__
#else
using PeerFn = std::nullptr_t;
#define ANVIL_BENCH_PEER(...) nullptr
#endif

std::string Human(int64_t n) {
  if (n % (1024 * 1024) == 0) return std::to_string(n / (1024 * 1024)) + "Mi";
  if (n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  if (n % 1000 == 0) return std::to_string(n / 1000) + "k";
  return std::to_string(n);
}

// ---- rows ----

void BenchSgemm(Table& table, [[maybe_unused]] const Options& opt) {
  if (!table.Wanted("mm (sgemm)")) return;
  for (int64_t n : {256, 512, 1024, 2048}) {
    const anvil::Tensor a = anvil::randn({n, n});
    const anvil::Tensor b = anvil::randn({n, n});
    anvil::Tensor a_out;
    Case c{"mm (sgemm)", std::to_string(n) + "x" + std::to_string(n) + " f32"};
    c.anvil.run = [&] { a_out = anvil::mm(a, b); };
#ifdef ANVIL_BENCH_HAVE_TORCH
    const torch::Tensor ta = ToTorch(a), tb = ToTorch(b);
    torch::Tensor t_out;
    c.torch.run = [&] { t_out = torch::mm(ta, tb); };
    ShareBlasThreads(&c.torch, opt.threads);
    // Sums of n products: the error bound grows with n.
    c.check = [&] { return Compare(a_out, t_out, 1e-3, 1e-4 * std::sqrt(static_cast<double>(n))); };
#endif
    const Row& r = table.Run(c);
    const double gflop = 2.0 * n * n * n / 1e9;
    table.AddNote("mm " + std::to_string(n) + ": anvil " + Fixed(gflop / r.anvil.ms * 1e3, 1) + " GFLOP/s, libtorch " +
                  Fixed(gflop / r.torch.ms * 1e3, 1) + " GFLOP/s");
  }
}

// Runs a row whose op returns a fresh tensor on each side; checks the last results.
void RunOutOfPlace(Table& table, const std::string& op, const std::string& size,
                   std::function<anvil::Tensor()> anvil_fn, [[maybe_unused]] PeerFn torch_fn,
                   [[maybe_unused]] double rtol, [[maybe_unused]] double atol) {
  if (!table.Wanted(op)) return;
  anvil::Tensor a_out;
  Case c{op, size};
  c.anvil.run = [&] { a_out = anvil_fn(); };
#ifdef ANVIL_BENCH_HAVE_TORCH
  torch::Tensor t_out;
  c.torch.run = [&] { t_out = torch_fn(); };
  c.check = [&] { return Compare(a_out, t_out, rtol, atol); };
#endif
  table.Run(c);
}

void BenchElementwise(Table& table, const Options& /*opt*/) {
  constexpr int64_t kN = 16 * 1024 * 1024;
  const std::string size = Human(kN) + " f32";
  const anvil::Tensor a = anvil::randn({kN});
  const anvil::Tensor b = anvil::randn({kN});
#ifdef ANVIL_BENCH_HAVE_TORCH
  const torch::Tensor ta = ToTorch(a), tb = ToTorch(b);
#endif
  // Anvil has no out= variants, so both peers run out of place: each call allocates its
  // result and frees the previous one, which is what user code like `c = a + b` pays.
  RunOutOfPlace(
      table, "add", size, [&] { return anvil::add(a, b); }, ANVIL_BENCH_PEER([&] { return torch::add(ta, tb); }), 1e-6,
      1e-6);
  RunOutOfPlace(
      table, "mul", size, [&] { return anvil::mul(a, b); }, ANVIL_BENCH_PEER([&] { return torch::mul(ta, tb); }), 1e-6,
      1e-6);
  RunOutOfPlace(
      table, "gelu", size, [&] { return anvil::gelu(a); }, ANVIL_BENCH_PEER([&] { return torch::gelu(ta); }), 1e-5,
      1e-6);

  // The same addition in place: no allocation on either side, so this row is the kernel
  // and memory bandwidth alone, and the gap to the `add` row is the allocator's share.
  if (table.Wanted("add_ (in-place)")) {
    anvil::Tensor acc = a.clone();
    Case c{"add_ (in-place)", size};
    c.anvil.run = [&] { acc.add_(b); };
#ifdef ANVIL_BENCH_HAVE_TORCH
    torch::Tensor tacc = ta.clone();
    c.torch.run = [&] { tacc.add_(tb); };
    // The accumulators saw different numbers of calls; check one fresh call instead.
    c.check = [&] {
      anvil::Tensor x = a.clone();
      torch::Tensor tx = ta.clone();
      x.add_(b);
      tx.add_(tb);
      return Compare(x, tx, 1e-6, 1e-6);
    };
#endif
    table.Run(c);
  }
}

void BenchReductions(Table& table, const Options& /*opt*/) {
  const anvil::Tensor x = anvil::randn({4096, 1024});
  const std::string size = "[4096, 1024] f32";
#ifdef ANVIL_BENCH_HAVE_TORCH
  const torch::Tensor tx = ToTorch(x);
#endif
  // A sum of 4M normal samples is about +-2000; summation order changes the last bits.
  RunOutOfPlace(
      table, "sum (all)", size, [&] { return anvil::sum(x); }, ANVIL_BENCH_PEER([&] { return tx.sum(); }), 1e-4, 1e-2);
  RunOutOfPlace(
      table, "softmax(dim=1)", size, [&] { return anvil::softmax(x, 1); },
      ANVIL_BENCH_PEER([&] { return torch::softmax(tx, 1); }), 1e-4, 1e-7);
  RunOutOfPlace(
      table, "logsumexp(dim=1)", size, [&] { return anvil::logsumexp(x, {1}); },
      ANVIL_BENCH_PEER([&] { return torch::logsumexp(tx, {1}); }), 1e-5, 1e-5);
}

void BenchGatherScatter(Table& table, const Options& /*opt*/) {
  constexpr int64_t kRows = 1000000;
  if (table.Wanted("index_select")) {
    // A 100k x 16 embedding-like table (6.4 MB, cache-resident in part) read at 1M random
    // rows: the output (64 MB) dominates the traffic.
    constexpr int64_t kTable = 100000, kWidth = 16;
    const anvil::Tensor tab = anvil::randn({kTable, kWidth});
    const anvil::Tensor idx = anvil::randint(0, kTable, {kRows});
    anvil::Tensor a_out;
    Case c{"index_select(dim=0)", "[100k, 16] f32 by 1M i64"};
    c.anvil.run = [&] { a_out = anvil::index_select(tab, 0, idx); };
#ifdef ANVIL_BENCH_HAVE_TORCH
    const torch::Tensor ttab = ToTorch(tab), tidx = ToTorch(idx);
    torch::Tensor t_out;
    c.torch.run = [&] { t_out = torch::index_select(ttab, 0, tidx); };
    c.check = [&] { return Compare(a_out, t_out, 0, 0); };
#endif
    table.Run(c);
  }
  if (table.Wanted("gather")) {
    const anvil::Tensor src = anvil::randn({kRows, 10});
    const anvil::Tensor idx = anvil::randint(0, 10, {kRows, 1});
    anvil::Tensor a_out;
    Case c{"gather(dim=1)", "[1M, 10] f32 by [1M, 1] i64"};
    c.anvil.run = [&] { a_out = anvil::gather(src, 1, idx); };
#ifdef ANVIL_BENCH_HAVE_TORCH
    const torch::Tensor tsrc = ToTorch(src), tidx = ToTorch(idx);
    torch::Tensor t_out;
    c.torch.run = [&] { t_out = torch::gather(tsrc, 1, tidx); };
    c.check = [&] { return Compare(a_out, t_out, 0, 0); };
#endif
    table.Run(c);
  }
}

// Point lookups into a volume, vectorised and one point at a time. The loop is what code
// ported from NumPy-style scalar access does; its cost per element is per-op overhead
// (argument parsing, a 0-dim tensor, item()), which the vectorised row amortises away.
void BenchAdvancedIndexing(Table& table, const Options& /*opt*/) {
  const std::string vec_op = "adv. index vol[xs, ys, zs]";
  const std::string loop_op = "adv. index loop, per point";
  const bool vec = table.Wanted(vec_op);
  const bool loop = table.Wanted(loop_op);
  if (!vec && !loop) return;
  constexpr int64_t kSide = 128, kPoints = 1000000, kLoopPoints = 10000;
  const anvil::Tensor vol = anvil::randn({kSide, kSide, kSide});
  const anvil::Tensor xs = anvil::randint(0, kSide, {kPoints});
  const anvil::Tensor ys = anvil::randint(0, kSide, {kPoints});
  const anvil::Tensor zs = anvil::randint(0, kSide, {kPoints});
#ifdef ANVIL_BENCH_HAVE_TORCH
  const torch::Tensor tvol = ToTorch(vol);
  const torch::Tensor txs = ToTorch(xs), tys = ToTorch(ys), tzs = ToTorch(zs);
#endif
  const std::string vsize = "1M (x,y,z) i64 in 128^3 f32";

  double vec_anvil = kNaN, vec_torch = kNaN;
  if (vec) {
    anvil::Tensor a_out;
    Case c{vec_op, vsize};
    c.anvil.run = [&] { a_out = anvil::index(vol, {xs, ys, zs}); };
#ifdef ANVIL_BENCH_HAVE_TORCH
    torch::Tensor t_out;
    c.torch.run = [&] { t_out = tvol.index({txs, tys, tzs}); };
    c.check = [&] { return Compare(a_out, t_out, 0, 0); };
#endif
    const Row& r = table.Run(c);
    vec_anvil = r.anvil.ms;
    vec_torch = r.torch.ms;
  }
  if (loop) {
    // The coordinates as plain integers, read outside the timed region.
    const std::vector<int64_t> px = xs.narrow(0, 0, kLoopPoints).to_vector<int64_t>();
    const std::vector<int64_t> py = ys.narrow(0, 0, kLoopPoints).to_vector<int64_t>();
    const std::vector<int64_t> pz = zs.narrow(0, 0, kLoopPoints).to_vector<int64_t>();
    double a_sum = 0;
    Case c{loop_op, "1M pts (10k timed, extrapolated)"};
    c.scale = static_cast<double>(kPoints) / kLoopPoints;
    c.anvil.run = [&] {
      double s = 0;
      for (int64_t i = 0; i < kLoopPoints; ++i) {
        s += vol.index({px[i], py[i], pz[i]}).item<float>();
      }
      a_sum = s;
    };
#ifdef ANVIL_BENCH_HAVE_TORCH
    double t_sum = 0;
    c.torch.run = [&] {
      double s = 0;
      for (int64_t i = 0; i < kLoopPoints; ++i) {
        s += tvol.index({px[i], py[i], pz[i]}).item<float>();
      }
      t_sum = s;
    };
    c.check = [&]() -> std::string {
      if (a_sum == t_sum) return "";
      return "sum of looked-up values " + std::to_string(a_sum) + " vs " + std::to_string(t_sum);
    };
#endif
    const Row& r = table.Run(c);
    const double us_a = r.anvil.ms * 1e3 / kPoints, us_t = r.torch.ms * 1e3 / kPoints;
    table.AddNote("adv. index loop: anvil " + Fixed(us_a, 3) + " us/element, libtorch " + Fixed(us_t, 3) +
                  " us/element");
    if (vec) {
      table.AddNote("adv. index, vectorised over loop speed-up: anvil " + Fixed(r.anvil.ms / vec_anvil, 0) +
                    "x, libtorch " + Fixed(r.torch.ms / vec_torch, 0) + "x");
    }
  }
}

// Per-op overhead: a chain of tiny ops on 16 floats, where the arithmetic is nothing and
// dispatch, allocation and graph bookkeeping are everything.
constexpr int kChainOps = 1000;

template <typename T, typename TanhFn>
T Chain(T y, TanhFn tanh_fn) {
  for (int i = 0; i < kChainOps; ++i) {
    switch (i % 3) {
      case 0:
        y = y * 1.0001;
        break;
      case 1:
        y = y + 0.001;
        break;
      default:
        y = tanh_fn(y);
        break;
    }
  }
  return y;
}

void BenchAutograd(Table& table, const Options& /*opt*/) {
  const anvil::Tensor x0 = anvil::randn({16});
  const auto anvil_tanh = [](const anvil::Tensor& t) { return anvil::tanh(t); };
#ifdef ANVIL_BENCH_HAVE_TORCH
  const torch::Tensor tx0 = ToTorch(x0);
  const auto torch_tanh = [](const torch::Tensor& t) { return torch::tanh(t); };
#endif
  const std::string size = std::to_string(kChainOps) + " ops on [16] f32";

  if (table.Wanted("op chain, no grad")) {
    anvil::Tensor a_out;
    Case c{"op chain, no grad", size};
    c.anvil.run = [&] {
      anvil::NoGradGuard no_grad;
      a_out = Chain(x0, anvil_tanh);
    };
#ifdef ANVIL_BENCH_HAVE_TORCH
    torch::Tensor t_out;
    c.torch.run = [&] {
      torch::NoGradGuard no_grad;
      t_out = Chain(tx0, torch_tanh);
    };
    c.check = [&] { return Compare(a_out, t_out, 1e-4, 1e-5); };
#endif
    table.Run(c);
  }

  if (table.Wanted("op chain, fwd+bwd")) {
    // Gradients accumulate into .grad across calls on both sides alike, as in a loop
    // that never zeroes them; the check below runs one clean pass.
    anvil::Tensor x = x0.detach().clone();
    x.requires_grad_(true);
    Case c{"op chain, fwd+bwd", size};
    c.anvil.run = [&] { Chain(x, anvil_tanh).sum().backward(); };
#ifdef ANVIL_BENCH_HAVE_TORCH
    torch::Tensor tx = tx0.detach().clone().requires_grad_(true);
    c.torch.run = [&] { Chain(tx, torch_tanh).sum().backward(); };
    c.check = [&] {
      anvil::Tensor xa = x0.detach().clone();
      xa.requires_grad_(true);
      torch::Tensor xt = tx0.detach().clone().requires_grad_(true);
      Chain(xa, anvil_tanh).sum().backward();
      Chain(xt, torch_tanh).sum().backward();
      return Compare(xa.grad(), xt.grad(), 1e-4, 1e-5);
    };
#endif
    const Row& r = table.Run(c);
    table.AddNote("op chain, fwd+bwd: anvil " + Fixed(r.anvil.ms * 1e3 / kChainOps, 2) + " us/op, libtorch " +
                  Fixed(r.torch.ms * 1e3 / kChainOps, 2) + " us/op");
  }
}

void PrintPreamble(const Options& opt) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::printf("# Anvil vs libtorch, CPU ops\n\n");
  std::printf("- date: %s\n", date);
  std::printf("- cpu: %s\n", CpuModel().c_str());
  std::printf("- threads: %d (anvil get_num_threads=%d", opt.threads, anvil::get_num_threads());
#ifdef ANVIL_BENCH_HAVE_TORCH
  std::printf(", libtorch get_num_threads=%d", torch::get_num_threads());
#endif
  std::printf(", openblas_get_num_threads=%d)\n", openblas_get_num_threads());
#ifdef ANVIL_BENCH_HAVE_TORCH
  std::printf("- libtorch: %s\n", TORCH_VERSION);
#else
  std::printf("- libtorch: not built in (peer column n/a)\n");
#endif
  for (const char* name :
       {"OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "GLIBC_TUNABLES", "OMP_NUM_THREADS", "ANVIL_NUM_THREADS"}) {
    std::printf("- %s=%s\n", name, EnvOr(name, "(unset)"));
  }
  std::printf(
      "- method: median of %d interleaved rounds, batches of >= %.0f ms, after "
      "warm-up; sgemm: libtorch's OpenBLAS gets %d threads during its calls\n\n",
      opt.rounds, opt.batch_ms, opt.threads);
  std::fflush(stdout);
}

// PyTorch 2.x (bench/ops_peer.py, in Python as its users run it) on the same rows right
// after the in-process table, same threads and timing: a second table beside both.
void PrintPyTorch2Table(const Table& table, const Options& opt) {
  char args[256];
  std::snprintf(args, sizeof(args), "%d %d %g '%s'", opt.threads, opt.rounds, opt.batch_ms, opt.filter.c_str());
  const PeerRun peer = RunPeerScript(ANVIL_BENCH_OPS_PEER, args);
  const std::string v = peer.version;
  std::printf("\n## Beside PyTorch %s (Python, same threads, run after the table above)\n\n", v.c_str());
  std::printf("| op | size | anvil ms | libtorch ms | PyTorch %s ms | anvil / PyTorch %s |\n", v.c_str(), v.c_str());
  std::printf("|---|---|---:|---:|---:|---:|\n");
  for (const Row& r : table.rows()) {
    const double p2 = peer.Get(r.op, r.size);
    std::printf("| %s | %s | %s | %s | %s | %s |\n", r.op.c_str(), r.size.c_str(), FormatMs(r.anvil.ms).c_str(),
                FormatMs(r.torch.ms).c_str(), std::isnan(p2) ? "n/a" : FormatMs(p2).c_str(),
                FormatRatio(r.anvil.ms, p2).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

// Max pooling (values and indices, as nn.MaxPool2d's forward computes them), from the digits
// CNN's small maps to an image network's first pooling; ops_peer.py's POOL_ROWS are the same.
void BenchPooling(Table& table, const Options& /*opt*/) {
  struct PoolRow {
    anvil::IntArray shape;
    int64_t k, s, p;
  };
  for (const PoolRow& r : std::vector<PoolRow>{{{64, 6, 8, 8}, 2, 2, 0},
                                               {{64, 16, 4, 4}, 2, 2, 0},
                                               {{32, 64, 56, 56}, 3, 2, 1},
                                               {{8, 64, 112, 112}, 2, 2, 0}}) {
    const anvil::Tensor x = anvil::randn(r.shape);
    std::string size = "[";
    for (size_t i = 0; i < r.shape.size(); ++i) size += (i > 0 ? ", " : "") + std::to_string(r.shape[i]);
    size += "] f32, k" + std::to_string(r.k) + " s" + std::to_string(r.s) + " p" + std::to_string(r.p);
    const anvil::nn::functional::Pool2dParams params{.kernel = {r.k, r.k}, .stride = {r.s, r.s}, .padding = {r.p, r.p}};
#ifdef ANVIL_BENCH_HAVE_TORCH
    const torch::Tensor tx = ToTorch(x);
#endif
    RunOutOfPlace(
        table, "max_pool2d", size, [&] { return anvil::nn::functional::max_pool2d(x, params); }, ANVIL_BENCH_PEER([&] {
          return torch::max_pool2d(tx, {r.k, r.k}, {r.s, r.s}, {r.p, r.p});
        }),
        0, 0);
  }
}

int main(int argc, char** argv) {
  Options opt = ParseOptions(argc, argv);
  if (opt.threads < 1) {
    std::fprintf(stderr, "usage: %s [threads >= 1] [filter]\n", argv[0]);
    return 2;
  }

  anvil::set_num_threads(opt.threads);
#ifdef ANVIL_BENCH_HAVE_TORCH
  torch::set_num_threads(opt.threads);
#endif
  anvil::manual_seed(20240601);

  PrintPreamble(opt);
  Table table(opt);
  table.PrintHeader();
  // Each group builds its inputs, runs its rows and frees them before the next, so the
  // process never holds more than one group's data.
  const std::vector<std::function<void(Table&, const Options&)>> groups = {
      BenchSgemm,    BenchElementwise, BenchReductions, BenchGatherScatter, BenchAdvancedIndexing,
      BenchAutograd, BenchPooling};
  for (const auto& group : groups) {
    std::string error;
    if (!Guarded([&] { group(table, opt); }, &error)) {
      // Input construction itself failed (an op the setup needs is broken).
      table.AddNote("ERROR setting up a group of rows: " + error);
    }
  }
  table.PrintNotes();
  PrintPyTorch2Table(table, opt);
  return 0;
}
