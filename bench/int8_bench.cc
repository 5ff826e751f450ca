// The int8 GEMM (core/backend/cpu/int8_gemm.h) against the float32 GEMM of the same shapes, one
// thread each: the int8 Linear layer's speed-up that issue 36 asks for (>= 3x float32 at batch
// 256 on AVX-512-VNNI), per int8 kernel this CPU runs, and oneDNN's dnnl_gemm_u8s8s32 beside
// them when libdnnl.so.2 is installed.
//
//   anvil_bench_int8
//
// Shapes: a Linear layer 1024 -> 1024 (x [m, 1024] times W^T) at batch m = 1, 32 and 256, and a
// 2048^3 product. sgemm runs the kernel Anvil selects for the shape (x W^T: tb = true); the
// int8 kernels run on weights packed beforehand (as a quantized layer packs them once). Each
// figure is the best of 5 timed batches of >= 50 ms (1 batch where one call takes more than
// 0.5 s); every int8 result is compared with the scalar reference bit for bit, oneDNN's too.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/int8_gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/onednn_primitives.h"
#include "core/util/cpu_features.h"
#include "core/util/thread_pool.h"

namespace {

using anvil::cpu::Int8GemmKernel;

struct Shape {
  const char* name;
  int64_t m, n, k;
};

const Shape kShapes[] = {
    {"Linear 1024x1024, batch 1", 1, 1024, 1024},
    {"Linear 1024x1024, batch 32", 32, 1024, 1024},
    {"Linear 1024x1024, batch 256", 256, 1024, 1024},
    {"2048^3", 2048, 2048, 2048},
};

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call: the best of 5 batches of >= 50 ms (one batch when a call takes > 0.5 s).
double SecondsPerCall(const std::function<void()>& run) {
  double t0 = Now();
  run();
  const double first = Now() - t0;
  if (first > 0.5) return first;
  const int reps = std::max(1, static_cast<int>(0.05 / std::max(first, 1e-7)));
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    t0 = Now();
    for (int i = 0; i < reps; ++i) run();
    best = std::min(best, (Now() - t0) / reps);
  }
  return best;
}

// oneDNN's int8 GEMM (C API of oneDNN 2.x, row-major): C = alpha * (A - ao) (B - bo) + beta * C + co.
using DnnlGemmU8S8S32 = int (*)(char transa, char transb, char offsetc, int64_t m, int64_t n, int64_t k, float alpha,
                                const uint8_t* a, int64_t lda, uint8_t ao, const int8_t* b, int64_t ldb, int8_t bo,
                                float beta, int32_t* c, int64_t ldc, const int32_t* co);

DnnlGemmU8S8S32 LoadDnnl(std::string& version) {
  void* handle = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  struct Version {
    int major, minor, patch;
    const char* hash;
    unsigned cpu_runtime, gpu_runtime;
  };
  using VersionFn = const Version* (*)();
  if (auto v = reinterpret_cast<VersionFn>(dlsym(handle, "dnnl_version"))) {
    version =
        "oneDNN " + std::to_string(v()->major) + "." + std::to_string(v()->minor) + "." + std::to_string(v()->patch);
  }
  return reinterpret_cast<DnnlGemmU8S8S32>(dlsym(handle, "dnnl_gemm_u8s8s32"));
}

std::string Gops(double ops, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", ops / seconds / 1e9);
  return buf;
}

}  // namespace

int main() {
  // oneDNN's GEMM runs on its OpenMP team: one thread, as every other column here.
  setenv("OMP_NUM_THREADS", "1", 1);
  anvil::set_num_threads(1);
  const anvil::CpuFeatures& f = anvil::cpu_features();
  std::printf("CPU: %s (%s family %d model %d); features: %s; ISA level %s (detected %s)\n", f.model_name.c_str(),
              f.vendor.c_str(), f.family, f.model, f.flags().c_str(),
              std::string(anvil::isa_name(anvil::cpu::active_isa())).c_str(),
              std::string(anvil::isa_name(anvil::detected_isa())).c_str());
  std::printf("%s\n", anvil::bench::KernelLine().c_str());
  std::string dnnl_version = "oneDNN";
  const DnnlGemmU8S8S32 dnnl = LoadDnnl(dnnl_version);
  const std::vector<Int8GemmKernel> kernels = anvil::cpu::available_int8_gemm_kernels();
  std::printf("- int8 kernels here:");
  for (Int8GemmKernel k : kernels) std::printf(" %s;", anvil::cpu::int8_gemm_kernel_name(k).c_str());
  std::printf(" selected: %s; AMX: %s\n", anvil::cpu::int8_gemm_kernel_name(anvil::cpu::selected_int8_gemm()).c_str(),
              anvil::cpu::int8_gemm_unavailable_reason(Int8GemmKernel::kAmx).empty()
                  ? "available"
                  : anvil::cpu::int8_gemm_unavailable_reason(Int8GemmKernel::kAmx).c_str());
  std::printf("- one thread; GFLOP/s (float32) and GOP/s (int8: 2 m n k operations); ratio = int8 / float32\n\n");

  std::printf("| shape (m x n x k) | float32 sgemm (kernel) |");
  for (Int8GemmKernel k : kernels) std::printf(" %s | ratio |", anvil::cpu::int8_gemm_kernel_name(k).c_str());
  std::printf(
      " %s dnnl_gemm_u8s8s32 | ratio | oneDNN matmul primitive (implementation) | ratio |"
      " int8 results equal the reference |\n|---|---|",
      dnnl == nullptr ? "n/a:" : dnnl_version.c_str());
  for (size_t i = 0; i < 2 * kernels.size() + 5; ++i) std::printf("---|");
  std::printf("\n");

  for (const Shape& s : kShapes) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uf(-1.0f, 1.0f);
    std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
    std::vector<float> x(static_cast<size_t>(s.m * s.k)), wf(static_cast<size_t>(s.n * s.k)),
        cf(static_cast<size_t>(s.m * s.n));
    for (float& v : x) v = uf(rng);
    for (float& v : wf) v = uf(rng);
    std::vector<uint8_t> a(static_cast<size_t>(s.m * s.k));
    std::vector<int8_t> w(static_cast<size_t>(s.n * s.k));
    for (auto& v : a) v = static_cast<uint8_t>(u8(rng));
    for (auto& v : w) v = static_cast<int8_t>(s8(rng));
    const double ops = 2.0 * double(s.m) * double(s.n) * double(s.k);

    const double t_f32 = SecondsPerCall(
        [&] { anvil::cpu::sgemm(false, true, s.m, s.n, s.k, x.data(), s.k, wf.data(), s.k, 0.0f, cf.data(), s.n); });
    const std::string f32_kernel = anvil::cpu::gemm_kernel_name(anvil::cpu::gemm_kernel_for(s.m, s.n, s.k));
    std::printf("| %s (%lldx%lldx%lld) | %s (%s) |", s.name, static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), Gops(ops, t_f32).c_str(), f32_kernel.c_str());

    std::vector<int32_t> reference(static_cast<size_t>(s.m * s.n)), c(reference.size());
    const anvil::cpu::PackedInt8Weight ref_w =
        anvil::cpu::pack_int8_weight(w.data(), s.n, s.k, s.k, Int8GemmKernel::kReference);
    anvil::cpu::int8_gemm(s.m, a.data(), s.k, ref_w, reference.data(), s.n);
    bool all_equal = true;
    for (Int8GemmKernel kernel : kernels) {
      const anvil::cpu::PackedInt8Weight packed = anvil::cpu::pack_int8_weight(w.data(), s.n, s.k, s.k, kernel);
      std::fill(c.begin(), c.end(), 0);
      const double t = SecondsPerCall([&] { anvil::cpu::int8_gemm(s.m, a.data(), s.k, packed, c.data(), s.n); });
      all_equal = all_equal && c == reference;
      std::printf(" %s | %.2f |", Gops(ops, t).c_str(), t_f32 / t);
    }
    if (dnnl != nullptr) {
      const int32_t zero = 0;
      std::fill(c.begin(), c.end(), 0);
      int status = 0;
      const double t = SecondsPerCall([&] {
        status =
            dnnl('N', 'T', 'F', s.m, s.n, s.k, 1.0f, a.data(), s.k, 0, w.data(), s.k, 0, 0.0f, c.data(), s.n, &zero);
      });
      std::printf(" %s | %.2f |", status == 0 ? Gops(ops, t).c_str() : "failed", t_f32 / t);
      const bool gemm_equal = c == reference;
      std::string why;
      bool primitive_equal = false;
      if (anvil::cpu::onednn::int8_available(&why)) {
        std::fill(c.begin(), c.end(), 0);
        const double tp = SecondsPerCall(
            [&] { anvil::cpu::onednn::int8_matmul(s.m, s.n, s.k, a.data(), s.k, w.data(), s.k, c.data(), s.n); });
        primitive_equal = c == reference;
        std::printf(" %s (%s) | %.2f |", Gops(ops, tp).c_str(),
                    anvil::cpu::onednn::int8_matmul_impl(s.m, s.n, s.k, s.k, s.k, s.n).c_str(), t_f32 / tp);
      } else {
        std::printf(" n/a (%s) | n/a |", why.c_str());
      }
      std::printf(" anvil: %s; dnnl_gemm_u8s8s32: %s; matmul primitive: %s |\n", all_equal ? "yes" : "NO",
                  gemm_equal ? "yes" : "no", primitive_equal ? "yes" : "no");
    } else {
      std::printf(" n/a | n/a | n/a | n/a | anvil: %s |\n", all_equal ? "yes" : "NO");
    }
    std::fflush(stdout);
  }
  return 0;
}
