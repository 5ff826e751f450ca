// The CPU probe (interface and why: cpu_features.h). Compiled for the plain x86-64 target
// (core/CMakeLists.txt), so the baseline check below can run, and refuse, on a CPU older
// than the baseline the kernels were built for.
#include "core/util/cpu_features.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/util/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ANVIL_X86 1
#endif

namespace anvil {
namespace {

#ifdef ANVIL_X86
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t Xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

bool Bit(uint32_t v, int i) { return (v >> i) & 1u; }

std::string Trim(std::string s) {
  const auto not_space = [](unsigned char ch) { return !std::isspace(ch) && ch != '\0'; };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  // Brand strings pad with runs of spaces inside too ("Intel(R) Xeon(R)    CPU").
  std::string out;
  for (char ch : s) {
    if (ch == ' ' && !out.empty() && out.back() == ' ') continue;
    out += ch;
  }
  return out;
}

// Linux's permission request for the AMX tile data state (XFEATURE_XTILEDATA = 18). Returns
// an empty string when granted, else the reason.
std::string RequestAmxPermission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXtileData = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXtileData) != 0) {
    return std::string("the kernel refused the AMX tile permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + "; Linux 5.16 or newer grants it)";
  }
  uint64_t perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0 || ((perm >> kXtileData) & 1u) == 0) {
    return "the AMX tile permission was not granted (ARCH_GET_XCOMP_PERM)";
  }
  return "";
#else
  return "AMX needs Linux's tile permission request, which this build lacks";
#endif
}
#endif  // ANVIL_X86

CpuFeatures Probe() {
  CpuFeatures f;
#ifdef ANVIL_X86
  const Regs r0 = Cpuid(0);
  const uint32_t max_leaf = r0.a;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &r0.b, 4);
  std::memcpy(vendor + 4, &r0.d, 4);
  std::memcpy(vendor + 8, &r0.c, 4);
  f.vendor = vendor;

  const Regs r1 = Cpuid(1);
  const uint32_t base_family = (r1.a >> 8) & 0xF, base_model = (r1.a >> 4) & 0xF;
  f.family = static_cast<int>(base_family == 0xF ? base_family + ((r1.a >> 20) & 0xFF) : base_family);
  f.model = static_cast<int>((base_family == 0x6 || base_family == 0xF) ? (((r1.a >> 16) & 0xF) << 4) | base_model
                                                                        : base_model);
  f.stepping = static_cast<int>(r1.a & 0xF);

  const bool osxsave = Bit(r1.c, 27);
  const uint64_t xcr0 = osxsave ? Xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;              // SSE + AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xE0) == 0xE0;  // opmask + zmm_hi256 + hi16_zmm
  const bool os_tiles = (xcr0 & 0x60000) == 0x60000;    // XTILECFG + XTILEDATA

  f.fma = os_ymm && Bit(r1.c, 12);
  f.movbe = Bit(r1.c, 22);
  f.avx = os_ymm && Bit(r1.c, 28);
  f.f16c = os_ymm && Bit(r1.c, 29);

  const Regs ext = Cpuid(0x80000000);
  if (ext.a >= 0x80000001) f.lzcnt = Bit(Cpuid(0x80000001).c, 5);
  if (ext.a >= 0x80000004) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = Cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i + 0, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
    f.model_name = Trim(brand);
  }
  if (f.model_name.empty()) f.model_name = f.vendor;

  if (max_leaf >= 7) {
    const Regs r7 = Cpuid(7, 0);
    f.bmi1 = Bit(r7.b, 3);
    f.avx2 = os_ymm && Bit(r7.b, 5);
    f.bmi2 = Bit(r7.b, 8);
    f.avx512f = os_zmm && Bit(r7.b, 16);
    f.avx512dq = os_zmm && Bit(r7.b, 17);
    f.avx512cd = os_zmm && Bit(r7.b, 28);
    f.avx512bw = os_zmm && Bit(r7.b, 30);
    f.avx512vl = os_zmm && Bit(r7.b, 31);
    f.avx512_vnni = os_zmm && Bit(r7.c, 11);
    f.avx512_fp16 = os_zmm && Bit(r7.d, 23);
    const bool cpu_amx_tile = Bit(r7.d, 24);
    if (r7.a >= 1) {
      const Regs r71 = Cpuid(7, 1);
      f.avx_vnni = os_ymm && Bit(r71.a, 4);
      f.avx512_bf16 = os_zmm && Bit(r71.a, 5);
    }
    if (cpu_amx_tile) {
      if (!os_tiles) {
        f.amx_unavailable_reason = "the OS does not enable the AMX tile state (XCR0)";
      } else {
        f.amx_unavailable_reason = RequestAmxPermission();
      }
      if (f.amx_unavailable_reason.empty()) {
        f.amx_tile = true;
        f.amx_bf16 = Bit(r7.d, 22);
        f.amx_int8 = Bit(r7.d, 25);
      }
    }
  }
#endif  // ANVIL_X86
  return f;
}

int CgroupCpuQuota() {
  // cgroup v2: "max 100000" (no quota) or "<quota> <period>".
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  const long long q = std::atoll(quota.c_str());
  if (q <= 0) return 0;
  return static_cast<int>((q + period - 1) / period);
}

}  // namespace

std::string CpuFeatures::flags() const {
  std::string out;
  const auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(f16c, "F16C");
  add(avx_vnni, "AVX-VNNI");
  add(avx512f, "AVX512F");
  add(avx512bw, "AVX512BW");
  add(avx512vl, "AVX512VL");
  add(avx512dq, "AVX512DQ");
  add(avx512_vnni, "AVX512-VNNI");
  add(avx512_bf16, "AVX512-BF16");
  add(avx512_fp16, "AVX512-FP16");
  add(amx_tile, "AMX-TILE");
  add(amx_bf16, "AMX-BF16");
  add(amx_int8, "AMX-INT8");
  return out.empty() ? "none beyond x86-64" : out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = Probe();
  return features;
}

std::string_view isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric:
      return "generic";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAmx:
      return "amx";
  }
  return "unknown";
}

CpuIsa parse_isa(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    if (lower == isa_name(isa)) return isa;
  }
  throw Error(detail::StrCat("unknown CPU ISA level '", name, "': expected generic, avx2, avx512 or amx"));
}

CpuIsa detected_isa() {
  const CpuFeatures& f = cpu_features();
  if (!f.x86_64_v3()) return CpuIsa::kGeneric;
  if (!f.avx512_core()) return CpuIsa::kAvx2;
  if (!(f.amx_tile && f.amx_bf16 && f.amx_int8)) return CpuIsa::kAvx512;
  return CpuIsa::kAmx;
}

int available_cpu_threads() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int quota = CgroupCpuQuota();
  if (quota > 0) n = std::min(n, quota);
  return std::max(n, 1);
}

#ifdef ANVIL_X86
namespace {
// The kernels are compiled for x86-64-v3 (core/CMakeLists.txt). On an older CPU the first
// AVX2 instruction would kill the process with SIGILL and no word of why; this check runs
// before any other static initialiser of the program and says so instead.
__attribute__((constructor(101))) void RefuseCpuBelowTheBaseline() {
#ifdef ANVIL_BASELINE_X86_64_V3
  const CpuFeatures& f = cpu_features();
  if (!f.x86_64_v3()) {
    std::fprintf(stderr,
                 "anvil: this CPU (%s) lacks x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE with OS support; it "
                 "has: %s), which this build of Anvil's kernels requires. Rebuild with "
                 "-DANVIL_CPU_BASELINE=x86-64-v2 for this machine.\n",
                 f.model_name.c_str(), f.flags().c_str());
    std::_Exit(EXIT_FAILURE);
  }
#endif
}
}  // namespace
#endif

}  // namespace anvil
