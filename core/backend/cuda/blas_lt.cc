#include "core/backend/cuda/blas_lt.h"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "core/backend/cuda/blas.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::cuda {
namespace {

// The cuBLASLt entry points used, from the library loaded at first use.
struct LtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

const LtApi& lt() {
  static const LtApi api = [] {
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = open_cuda_library(name, "cuBLASLt, needed for int8 products on the GPU");
    LtApi a;
    bind_cuda_symbol(h, name, "cublasLtCreate", a.create);
    bind_cuda_symbol(h, name, "cublasLtMatmulDescCreate", a.desc_create);
    bind_cuda_symbol(h, name, "cublasLtMatmulDescDestroy", a.desc_destroy);
    bind_cuda_symbol(h, name, "cublasLtMatmulDescSetAttribute", a.desc_set);
    bind_cuda_symbol(h, name, "cublasLtMatrixLayoutCreate", a.layout_create);
    bind_cuda_symbol(h, name, "cublasLtMatrixLayoutDestroy", a.layout_destroy);
    bind_cuda_symbol(h, name, "cublasLtMatmulPreferenceCreate", a.pref_create);
    bind_cuda_symbol(h, name, "cublasLtMatmulPreferenceDestroy", a.pref_destroy);
    bind_cuda_symbol(h, name, "cublasLtMatmulPreferenceSetAttribute", a.pref_set);
    bind_cuda_symbol(h, name, "cublasLtMatmulAlgoGetHeuristic", a.heuristic);
    bind_cuda_symbol(h, name, "cublasLtMatmul", a.matmul);
    return a;
  }();
  return api;
}

// Never destroyed (thread exit at process end only), as blas.cc's handles.
thread_local std::array<cublasLtHandle_t, 64> tls_handles{};

cublasLtHandle_t Handle(int device) {
  cublasLtHandle_t& h = tls_handles.at(static_cast<size_t>(device));
  if (h == nullptr) ANVIL_CUBLAS_CHECK(lt().create(&h));
  return h;
}

// One product's descriptors, destroyed with it (also when making one of them fails).
class Descriptors {
 public:
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, c = nullptr;
  Descriptors(int64_t m, int64_t n, int64_t k) {
    try {
      Create(m, n, k);
    } catch (...) {
      Destroy();
      throw;
    }
  }
  ~Descriptors() { Destroy(); }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

 private:
  void Create(int64_t m, int64_t n, int64_t k) {
    ANVIL_CUBLAS_CHECK(lt().desc_create(&op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
    ANVIL_CUBLAS_CHECK(lt().desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof(transposed)));
    ANVIL_CUBLAS_CHECK(lt().desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)));
    // Column-major, the row-major operands read as their transposes: w[n, k] is a k x n
    // matrix (transposed by the op to n x k), x[m, k] a k x m one, and c[m, n] an n x m one,
    // so cᵀ = w · xᵀ.
    ANVIL_CUBLAS_CHECK(lt().layout_create(&w, CUDA_R_8I, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
    ANVIL_CUBLAS_CHECK(lt().layout_create(&x, CUDA_R_8I, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
    ANVIL_CUBLAS_CHECK(lt().layout_create(&c, CUDA_R_32I, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n));
  }
  void Destroy() {
    if (c != nullptr) lt().layout_destroy(c);
    if (x != nullptr) lt().layout_destroy(x);
    if (w != nullptr) lt().layout_destroy(w);
    if (op != nullptr) lt().desc_destroy(op);
    c = x = w = nullptr;
    op = nullptr;
  }
};

// The workspace an algorithm may ask for: cuBLASLt's own recommendation for Hopper's int8
// kernels is a few MiB; more buys nothing for these shapes.
constexpr uint64_t kMaxWorkspaceBytes = uint64_t{4} << 20;

// The heuristic's first choice per (device, m, n, k), or none. Bounded: batch sizes are the
// only key that varies, and a server sees few of them; past the bound the cache starts over.
struct AlgoCache {
  Mutex mu;
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::optional<cublasLtMatmulHeuristicResult_t>> found
      ABSL_GUARDED_BY(mu);
};
constexpr size_t kMaxCachedShapes = 1024;

std::optional<cublasLtMatmulHeuristicResult_t> Choose(int device, int64_t m, int64_t n, int64_t k,
                                                      const Descriptors& d) {
  static AlgoCache* cache = new AlgoCache();  // leaked: used until process exit
  const auto key = std::make_tuple(device, m, n, k);
  {
    MutexLock lock(&cache->mu);
    if (auto it = cache->found.find(key); it != cache->found.end()) return it->second;
  }
  const cublasLtHandle_t handle = Handle(device);
  cublasLtMatmulPreference_t pref = nullptr;
  ANVIL_CUBLAS_CHECK(lt().pref_create(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t set =
      lt().pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kMaxWorkspaceBytes, sizeof(kMaxWorkspaceBytes));
  const cublasStatus_t asked =
      set == CUBLAS_STATUS_SUCCESS ? lt().heuristic(handle, d.op, d.w, d.x, d.c, d.c, pref, 1, &result, &count) : set;
  lt().pref_destroy(pref);
  // NOT_SUPPORTED and ARCH_MISMATCH are cuBLASLt's "no algorithm for this here": the caller
  // computes another way.
  const bool unsupported = asked == CUBLAS_STATUS_NOT_SUPPORTED || asked == CUBLAS_STATUS_ARCH_MISMATCH;
  if (!unsupported) ANVIL_CUBLAS_CHECK(asked);
  std::optional<cublasLtMatmulHeuristicResult_t> chosen;
  if (asked == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS) chosen = result;
  MutexLock lock(&cache->mu);
  if (cache->found.size() >= kMaxCachedShapes) cache->found.clear();
  cache->found.emplace(key, chosen);
  return chosen;
}

void CheckShape(int64_t m, int64_t n, int64_t k) {
  ANVIL_CHECK(m >= 0 && n > 0 && k > 0 && n % 4 == 0 && k % 4 == 0, "int8_matmul_nt: expected m >= 0 and n, k ",
              "positive multiples of 4, got m=", m, " n=", n, " k=", k);
  ANVIL_CHECK(m <= std::numeric_limits<int32_t>::max() && n <= std::numeric_limits<int32_t>::max() &&
                  k <= std::numeric_limits<int32_t>::max(),
              "int8_matmul_nt: sizes beyond cuBLASLt's 32-bit limit: m=", m, " n=", n, " k=", k);
}

// The heuristic chooses for 256-byte aligned operands (its default minimum alignment).
bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 256 == 0; }

}  // namespace

bool int8_matmul_nt(int device, int64_t m, int64_t n, int64_t k, const int8_t* x, const int8_t* w, int32_t* c,
                    const std::function<void()>& fill_x) {
  CheckShape(m, n, k);
  ANVIL_CHECK(Aligned(x) && Aligned(w) && Aligned(c), "int8_matmul_nt: expected 256-byte aligned operands");
  if (m == 0) return true;
  DeviceGuard guard(device);
  const Descriptors d(m, n, k);
  const std::optional<cublasLtMatmulHeuristicResult_t> algo = Choose(device, m, n, k, d);
  if (!algo) return false;
  if (fill_x) fill_x();
  // The workspace comes from the device's caching allocator, so steady-state calls allocate
  // nothing from the driver; it stays alive until the product queued on this stream has run
  // (the allocator orders reuse after the stream's work).
  Tensor workspace;
  if (algo->workspaceSize > 0)
    workspace = empty({static_cast<int64_t>(algo->workspaceSize)},
                      TensorOptions(kUInt8).with_device(Device(DeviceType::CUDA, device)));
  const int32_t one = 1, zero = 0;
  ANVIL_CUBLAS_CHECK(lt().matmul(Handle(device), d.op, &one, w, d.w, x, d.x, &zero, c, d.c, c, d.c, &algo->algo,
                                 workspace.defined() ? workspace.data_ptr() : nullptr, algo->workspaceSize,
                                 current_stream(device)));
  return true;
}

}  // namespace anvil::cuda
