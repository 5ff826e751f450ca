// Loading the BLAS libraries (interface and why: blas_library.h).
#include "core/backend/cpu/blas_library.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "core/backend/cpu/isa.h"
#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil::cpu::blas {
namespace {

// setenv/getenv are not safe against each other across threads; every variable Anvil sets
// for a library is set under this lock, right around the dlopen that reads it, and restored
// after, so the process's environment is as the user left it. What it guards is the process's
// environment, which no annotation can name: ScopedEnv, the one writer, requires it instead.
Mutex g_env_mu;

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_env_mu) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_env_mu) {
    if (previous_) {
      setenv(name_, previous_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  return out != nullptr;
}

// The OpenBLAS core whose kernels fit an ISA level ("" = let OpenBLAS detect).
std::string CoreFor(CpuIsa level) {
  switch (level) {
    case CpuIsa::kGeneric:
      return "";
    case CpuIsa::kAvx2:
      return "Haswell";
    case CpuIsa::kAvx512:
    case CpuIsa::kAmx:
      // Cooperlake is SkylakeX plus the AVX512-BF16 kernels (sbgemm); same float32 kernels.
      return cpu_features().avx512_bf16 ? "Cooperlake" : "SkylakeX";
  }
  return "";
}

CpuIsa IsaOfCore(const std::string& core) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == c) return CpuIsa::kAvx512;
  }
  for (const char* c : {"Haswell", "Zen"}) {
    if (core == c) return CpuIsa::kAvx2;
  }
  return CpuIsa::kGeneric;
}

OpenBlas LoadOpenBlas() {
  OpenBlas lib;
  void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle != nullptr) {
    lib.core_source = "loaded by another library of this process first";
  } else {
    const std::string want = CoreFor(requested_isa());
    MutexLock lock(&g_env_mu);
    // OpenBLAS starts its thread pool when it loads, sized from OPENBLAS_NUM_THREADS (else the
    // core count); Anvil runs it single-threaded inside its own pool (below), so it loads with
    // one thread and starts none.
    ScopedEnv one_thread("OPENBLAS_NUM_THREADS", "1");
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
      lib.core_source = std::string("OPENBLAS_CORETYPE=") + std::getenv("OPENBLAS_CORETYPE") + " in the environment";
      handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    } else if (want.empty()) {
      lib.core_source = "detected by OpenBLAS";
      handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    } else {
      lib.core_source = "chosen from the CPU's features";
      ScopedEnv env("OPENBLAS_CORETYPE", want);
      handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    }
  }
  ANVIL_CHECK(handle != nullptr, "cannot load OpenBLAS (libopenblas.so.0): ", dlerror(),
              "; install it (Debian: apt-get install libopenblas0)");
  void (*set_threads)(int) = nullptr;
  char* (*corename)() = nullptr;
  const bool ok = Resolve(handle, "cblas_sgemm", lib.sgemm) && Resolve(handle, "cblas_dgemm", lib.dgemm) &&
                  Resolve(handle, "cblas_sgemv", lib.sgemv) && Resolve(handle, "cblas_dgemv", lib.dgemv) &&
                  Resolve(handle, "openblas_set_num_threads", set_threads) &&
                  Resolve(handle, "openblas_get_corename", corename);
  ANVIL_CHECK(ok, "libopenblas.so.0 lacks the CBLAS functions Anvil calls: is it OpenBLAS?");
  // Anvil's pool splits the work; OpenBLAS's own threads next to it would oversubscribe the
  // cores (docs/design.md, "Machine facts").
  set_threads(1);
  const char* name = corename();
  lib.core = name != nullptr ? name : "unknown";
  lib.core_isa = IsaOfCore(lib.core);
  return lib;
}

// BLIS names its sub-configurations by id (its arch_t); BLIS_ARCH_TYPE takes the number.
// Ids 0-8 are the x86 ones in BLIS 0.9 (skx, knl, knc, haswell, sandybridge, penryn, zen3,
// zen2, zen); the table lookup bli_arch_string does not initialise the library.
std::optional<int> BlisArchId(const char* (*arch_string)(int), const char* want) {
  for (int id = 0; id <= 8; ++id) {
    const char* s = arch_string(id);
    if (s != nullptr && std::strcmp(s, want) == 0) return id;
  }
  return std::nullopt;
}

// An optional library: loaded, or the reason it is not.
template <typename Lib>
struct Loaded {
  std::optional<Lib> lib;
  std::string why;
};

// dlopen with the reason and the Debian package to install when it fails.
void* OpenOptional(const char* soname, const char* package, std::string& why) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    why = std::string(soname) + " not loadable (" + dlerror() + "; Debian: apt-get install " + package + ")";
  }
  return handle;
}

Loaded<Blis> LoadBlis() {
  Loaded<Blis> out;
  void* handle = OpenOptional("libblis.so.4", "libblis4", out.why);
  if (handle == nullptr) return out;
  Blis lib;
  const char* (*arch_string)(int) = nullptr;
  int (*arch_query)() = nullptr;
  void (*set_threads)(int64_t) = nullptr;
  void (*init)() = nullptr;
  const char* (*version)() = nullptr;
  void (*runtime_from_global)(void*) = nullptr;
  if (!(Resolve(handle, "bli_sgemm_ex", lib.sgemm_ex) && Resolve(handle, "bli_arch_string", arch_string) &&
        Resolve(handle, "bli_init", init) && Resolve(handle, "bli_arch_query_id", arch_query) &&
        Resolve(handle, "bli_thread_set_num_threads", set_threads) &&
        Resolve(handle, "bli_info_get_version_str", version) &&
        Resolve(handle, "bli_rntm_init_from_global", runtime_from_global))) {
    out.why = "libblis.so.4 lacks bli_sgemm_ex, its version or its arch and runtime queries";
    return out;
  }
  {
    // BLIS reads BLIS_ARCH_TYPE when it initialises (bli_init, here, and in the queries it
    // makes later): the variable stays set until that is done.
    MutexLock lock(&g_env_mu);
    const CpuIsa level = requested_isa();
    const char* want = level >= CpuIsa::kAvx512 ? "skx" : level == CpuIsa::kAvx2 ? "haswell" : nullptr;
    std::optional<int> id;
    if (want != nullptr && std::getenv("BLIS_ARCH_TYPE") == nullptr) id = BlisArchId(arch_string, want);
    std::optional<ScopedEnv> env;
    if (id) env.emplace("BLIS_ARCH_TYPE", std::to_string(*id));
    init();
    lib.arch = arch_string(arch_query());
  }
  set_threads(1);
  const char* v = version();
  lib.version = v != nullptr ? v : "unknown";
  // Only for the release whose runtime layout is known here (Debian 12's): a later one has the
  // kernels mended and its own layout, and gets the library's defaults (a null runtime).
  if (lib.version.rfind("0.9.", 0) == 0) {
    runtime_from_global(&lib.runtime);
    lib.runtime.l3_sup = false;
    lib.small_kernels_off = true;
  }
  out.lib = lib;
  return out;
}

Loaded<OneDnn> LoadOneDnn() {
  Loaded<OneDnn> out;
  void* handle = nullptr;
  {
    // oneDNN's OpenMP threads, after a region, spin for the next (libgomp's default policy),
    // and on a machine with as many cores as Anvil's pool has threads that spinning takes the
    // cores from the pool's kernels between oneDNN's multi-threaded products (16 % of a bf16
    // MLP training step's samples were a libgomp spin loop). Passive waiting puts them to
    // sleep at once; their wake-up costs microseconds against the milliseconds of the products
    // that use them (onednn_primitives.h). libgomp reads the variable when it is loaded, here;
    // a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
    MutexLock lock(&g_env_mu);
    std::optional<ScopedEnv> passive;
    if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
      passive.emplace("OMP_WAIT_POLICY", "passive");
    }
    handle = OpenOptional("libdnnl.so.2", "libdnnl2", out.why);
  }
  if (handle == nullptr) return out;
  OneDnn lib;
  struct Version {
    int major, minor, patch;
    const char* hash;
    unsigned cpu_runtime, gpu_runtime;
  };
  const Version* (*version)() = nullptr;
  int (*set_max_isa)(int) = nullptr;
  if (!(Resolve(handle, "dnnl_sgemm", lib.sgemm) && Resolve(handle, "dnnl_version", version) &&
        Resolve(handle, "dnnl_set_max_cpu_isa", set_max_isa))) {
    out.why = "libdnnl.so.2 lacks dnnl_sgemm";
    return out;
  }
  // Searched in its dependencies. Both or neither: the product restores what it changes.
  if (!(Resolve(handle, "omp_set_num_threads", lib.omp_set_num_threads) &&
        Resolve(handle, "omp_get_max_threads", lib.omp_get_max_threads))) {
    lib.omp_set_num_threads = nullptr;
    lib.omp_get_max_threads = nullptr;
  }
  // dnnl_cpu_isa_t values (oneapi/dnnl/dnnl_types.h): cap its JIT at the requested level.
  constexpr int kAvx2 = 0x7, kAvx512Core = 0x27, kAll = 0x0;
  switch (requested_isa()) {
    case CpuIsa::kGeneric:
      set_max_isa(kAll);
      break;  // generic: the library as it detects
    case CpuIsa::kAvx2:
      set_max_isa(kAvx2);
      break;
    case CpuIsa::kAvx512:
      set_max_isa(cpu_features().avx512_bf16 ? 0xe7 : kAvx512Core);
      break;
    case CpuIsa::kAmx:
      set_max_isa(kAll);
      break;
  }
  const Version* v = version();
  lib.version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  lib.handle = handle;
  out.lib = lib;
  return out;
}

}  // namespace

const OpenBlas& openblas() {
  static const OpenBlas lib = LoadOpenBlas();
  return lib;
}

static_assert(offsetof(Blis::Runtime09, num_threads) == 8 && offsetof(Blis::Runtime09, thrloop) == 16 &&
                  offsetof(Blis::Runtime09, l3_sup) == 66 && offsetof(Blis::Runtime09, sba_pool) == 72 &&
                  sizeof(Blis::Runtime09) == 88,
              "Blis::Runtime09 must match BLIS 0.9.0's rntm_t on x86-64");

void Blis::sgemm(int64_t m, int64_t n, int64_t k, const float* alpha, const float* a, int64_t rsa, int64_t csa,
                 const float* b, int64_t rsb, int64_t csb, const float* beta, float* c, int64_t rsc,
                 int64_t csc) const {
  Runtime09 call = runtime;  // BLIS attaches this call's pools to it
  sgemm_ex(0, 0, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc, nullptr,
           small_kernels_off ? &call : nullptr);
}

const Blis* blis(std::string* why) {
  static const Loaded<Blis> load = LoadBlis();
  if (why != nullptr) *why = load.why;
  return load.lib ? &*load.lib : nullptr;
}

const OneDnn* onednn(std::string* why) {
  static const Loaded<OneDnn> load = LoadOneDnn();
  if (why != nullptr) *why = load.why;
  return load.lib ? &*load.lib : nullptr;
}

}  // namespace anvil::cpu::blas
