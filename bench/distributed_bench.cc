// Data-parallel benchmarks (bench/RESULTS.md): ranks are processes this program forks before
// it starts any thread, meeting through Gloo's file store in a temporary folder over lo.
//   1. all_reduce bus bandwidth of 1, 16 and 256 MiB float32 on 2 ranks: Anvil's
//      GlooProcessGroup beside a bare Gloo allreduce loop (same context setup, same ring
//      algorithm) in the same run; ratio = Anvil / bare.
//   2. overlap: the 784-1024-1024-10 MLP at batch 128 per rank, forward + backward alone, the
//      bucketed all-reduce alone, and both through DistributedDataParallel; hidden share =
//      (alone + all-reduce - DDP) / all-reduce.
//   3. 2 ranks x 1 thread vs 1 process x 2 threads: SGD steps of that MLP at global batch 256.
//
//   anvil_bench_distributed [--quick]
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/distributed/ddp.h"
#include "core/distributed/gloo_process_group.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/util/thread_pool.h"

using namespace anvil;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Runs body(rank) in `world` forked processes; returns when all exited (0 if all succeeded).
int Fork(int world, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t p = ::fork();
    if (p == 0) {
      std::fflush(stdout);
      ::_exit(body(r));
    }
    pids.push_back(p);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed = 1;
  }
  return failed;
}

std::string Rdzv(const std::string& name) {
  const std::string dir = "/tmp/anvil-bench-rdzv-" + std::to_string(::getpid()) + "-" + name;
  std::filesystem::remove_all(dir);
  for (const char* sub : {"", "/anvil", "/bare"}) std::filesystem::create_directories(dir + sub);
  return dir;
}

std::shared_ptr<distributed::ProcessGroup> Group(const std::string& dir, int rank, int world) {
  auto store = std::make_shared<gloo::rendezvous::FileStore>(dir);
  return std::make_shared<distributed::GlooProcessGroup>(store, rank, world);
}

std::shared_ptr<nn::Sequential> Mlp() {
  manual_seed(0);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 1024), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1024, 1024),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1024, 10)});
}

// Median of `reps` timings of fn().
double Median(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto s = Clock::now();
    fn();
    t.push_back(Seconds(Clock::now() - s));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void AllReduceBandwidth(bool quick) {
  std::printf("\n## all_reduce, 2 ranks over lo, float32 (bus bandwidth = 2(n-1)/n x bytes / time)\n\n");
  std::printf(
      "| size | Anvil ms | bare Gloo ms | Anvil GB/s | bare GB/s | Anvil / bare |\n|---|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  for (int64_t mib : {1, 16, 256}) {
    const std::string dir = Rdzv("ar" + std::to_string(mib));
    const int reps = quick ? 3 : (mib >= 256 ? 7 : mib >= 16 ? 25 : 101);
    Fork(2, [&](int rank) {
      set_num_threads(1);
      const int64_t n = mib * (1 << 20) / 4;
      // Anvil's group.
      auto group = Group(dir + "/anvil", rank, 2);
      Tensor t = full({n}, 1.0);
      // Bare Gloo: its own context, the same ring allreduce on a plain buffer.
      gloo::transport::tcp::attr attr;
      attr.iface = "lo";
      attr.ai_family = AF_INET;
      auto device = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::FileStore store(dir + "/bare");
      auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, 2);
      ctx->connectFullMesh(store, device);
      std::vector<float> buf(static_cast<size_t>(n), 1.0f);
      auto bare_op = [&] {
        gloo::AllreduceOptions opts(ctx);
        opts.setOutput(buf.data(), buf.size());
        opts.setReduceFunction([](void* c, const void* a, const void* b, size_t k) { gloo::sum<float>(c, a, b, k); });
        gloo::allreduce(opts);
      };
      auto anvil_op = [&] { group->all_reduce({t}, distributed::ReduceOp::kSum)->wait(); };
      anvil_op();  // warm-up
      bare_op();
      // Interleaved, so both see the same machine: medians of each.
      std::vector<double> ta, tb;
      for (int i = 0; i < reps; ++i) {
        ta.push_back(Median(1, anvil_op));
        tb.push_back(Median(1, bare_op));
      }
      std::sort(ta.begin(), ta.end());
      std::sort(tb.begin(), tb.end());
      const double anvil = ta[ta.size() / 2], bare = tb[tb.size() / 2];
      if (rank == 0) {
        const double bytes = static_cast<double>(n) * 4;
        const double bus = 2.0 * (2 - 1) / 2 * bytes;
        std::printf("| %lld MiB | %.2f | %.2f | %.2f | %.2f | %.2f |\n", static_cast<long long>(mib), anvil * 1e3,
                    bare * 1e3, bus / anvil / 1e9, bus / bare / 1e9, bare / anvil);
        std::fflush(stdout);
      }
      return 0;
    });
  }
}

void Overlap(bool quick) {
  std::printf("\n## Overlap: 784-1024-1024-10 MLP, batch 128 per rank, 2 ranks x 1 thread\n\n");
  std::fflush(stdout);
  const std::string dir = Rdzv("overlap");
  const int reps = quick ? 5 : 30;
  Fork(2, [&](int rank) {
    set_num_threads(1);
    auto model = Mlp();
    auto group = Group(dir, rank, 2);
    const Tensor x = randn({128, 784}), y = randint(0, 10, {128});
    auto fwd_bwd = [&](nn::Module& m) {
      m.zero_grad();
      nn::F::cross_entropy(m.forward(x), y).backward();
    };
    fwd_bwd(*model);
    const double alone = Median(reps, [&] { fwd_bwd(*model); });
    // The same buckets DDP makes, reduced one after another without a backward to hide behind.
    // DDP's default buckets (25 MiB after a 1 MiB first one), then 1 MiB buckets: more, smaller
    // reductions that start earlier in backward.
    for (int64_t cap_mib : {25, 1}) {
      distributed::DdpOptions o;
      o.bucket_bytes = cap_mib << 20;
      auto ddp = std::make_shared<distributed::DistributedDataParallel>(model, group, o);
      fwd_bwd(*ddp);
      const double with_ddp = Median(reps, [&] { fwd_bwd(*ddp); });
      const double reduce_only = Median(reps, [&] { ddp->reduce_gradients(); });
      const double hidden = (alone + reduce_only - with_ddp) / reduce_only;
      if (rank == 0) {
        if (cap_mib == 25) {
          std::printf(
              "| buckets | forward+backward alone ms | all-reduce alone ms | DDP forward+backward ms | "
              "all-reduce hidden | launched during backward |\n|---|---:|---:|---:|---:|---:|\n");
        }
        std::printf("| %zu (cap %lld MiB) | %.2f | %.2f | %.2f | %.0f %% | %lld of %lld |\n",
                    ddp->bucket_parameter_names().size(), static_cast<long long>(cap_mib), alone * 1e3,
                    reduce_only * 1e3, with_ddp * 1e3, 100 * hidden,
                    static_cast<long long>(ddp->buckets_launched_during_backward()),
                    static_cast<long long>(ddp->buckets_reduced()));
        std::fflush(stdout);
      }
    }
    return 0;
  });
}

void Scaling(bool quick) {
  std::printf("\n## 2 ranks x 1 thread vs 1 process x 2 threads: SGD steps, global batch 256 (report only)\n\n");
  std::fflush(stdout);
  const int steps = quick ? 5 : 40;
  const std::string dir = Rdzv("scaling");
  double one = 0;
  {
    // One process, two threads, in a child so this program's own threads stay unstarted.
    int pipefd[2];
    if (::pipe(pipefd) != 0) return;
    Fork(1, [&](int) {
      set_num_threads(2);
      auto model = Mlp();
      optim::SGD opt(model->parameters(), {{"lr", 0.01}});
      const Tensor x = randn({256, 784}), y = randint(0, 10, {256});
      auto step = [&] {
        opt.zero_grad();
        nn::F::cross_entropy(model->forward(x), y).backward();
        opt.step();
      };
      step();
      const auto s = Clock::now();
      for (int i = 0; i < steps; ++i) step();
      const double t = Seconds(Clock::now() - s) / steps;
      (void)!::write(pipefd[1], &t, sizeof(t));
      return 0;
    });
    (void)!::read(pipefd[0], &one, sizeof(one));
    ::close(pipefd[0]);
    ::close(pipefd[1]);
  }
  Fork(2, [&](int rank) {
    set_num_threads(1);
    auto model = Mlp();
    auto ddp = std::make_shared<distributed::DistributedDataParallel>(model, Group(dir, rank, 2));
    optim::SGD opt(model->parameters(), {{"lr", 0.01}});
    const Tensor x = randn({128, 784}), y = randint(0, 10, {128});
    auto step = [&] {
      opt.zero_grad();
      nn::F::cross_entropy(ddp->forward(x), y).backward();
      opt.step();
    };
    step();
    const auto s = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double t = Seconds(Clock::now() - s) / steps;
    if (rank == 0) {
      std::printf("| setup | ms per step | samples/s |\n|---|---:|---:|\n");
      std::printf("| 1 process x 2 threads | %.2f | %.0f |\n", one * 1e3, 256 / one);
      std::printf("| 2 ranks x 1 thread (Gloo, lo) | %.2f | %.0f |\n", t * 1e3, 256 / t);
      std::printf("| ratio (2 ranks / 1 process) | %.2f | |\n", one / t);
      std::fflush(stdout);
    }
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::printf("# anvil_bench_distributed\n");
  std::fflush(stdout);
  AllReduceBandwidth(quick);
  Overlap(quick);
  Scaling(quick);
  // Last: the summary loads the BLAS library, whose threads must not exist when ranks fork.
  std::printf("\n%s\n", cpu_kernel_summary().c_str());
  return 0;
}
