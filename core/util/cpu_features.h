// What this CPU can run, read once from cpuid and the OS (never from the CPU's model name,
// which VMs often replace by a generic one, and never from the build machine).
//
// A feature counts only when the OS has enabled its register state too (XGETBV): a VM can
// report AVX-512 in cpuid and still not save zmm registers. AMX tiles also need the Linux
// permission request (arch_prctl ARCH_REQ_XCOMP_PERM), made here once; without it the first
// tile instruction kills the process, so a refused request means no AMX.
//
// Thread-safe: the probe runs once, on first use.
#pragma once

#include <string>
#include <string_view>

namespace anvil {

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // the brand string, trimmed ("AMD EPYC", "Intel(R) Xeon(R) ...")
  int family = 0, model = 0, stepping = 0;

  // x86-64-v3 (the build baseline): AVX, AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE, with the OS
  // saving ymm state.
  bool avx = false, avx2 = false, fma = false, f16c = false, bmi1 = false, bmi2 = false, lzcnt = false, movbe = false;
  // AVX-512 (counted only with the OS saving zmm and opmask state).
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false, avx512_vnni = false,
       avx512_bf16 = false, avx512_fp16 = false;
  bool avx_vnni = false;  // the VEX-encoded VNNI (Alder Lake, Zen 5)
  // AMX (counted only with the OS saving tile state and this process permitted to use it).
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // AMX is in cpuid but the tile permission was refused (or the kernel is too old): why.
  std::string amx_unavailable_reason;

  bool x86_64_v3() const { return avx && avx2 && fma && f16c && bmi1 && bmi2 && lzcnt && movbe; }
  bool avx512_core() const { return avx512f && avx512bw && avx512vl && avx512dq; }

  // "AVX2 FMA F16C AVX512F AVX512BW ... AMX-INT8": the features above that are present.
  std::string flags() const;
};

// The probe's result for this process.
const CpuFeatures& cpu_features();

// Kernel levels, each including the ones before it. generic runs no kernel chosen by CPU
// features (the compiled baseline and the BLAS library as it detects the CPU); avx2 the
// x86-64-v3 kernels; avx512 adds AVX-512 F/BW/VL/DQ kernels; amx adds AMX tile kernels.
enum class CpuIsa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

std::string_view isa_name(CpuIsa isa);  // "generic", "avx2", "avx512", "amx"
// Parses a level name (case-insensitive); throws anvil::Error naming the accepted values.
CpuIsa parse_isa(std::string_view name);

// The highest level this CPU and OS support.
CpuIsa detected_isa();

// CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota (a
// container's --cpus) when one is set. At least 1.
int available_cpu_threads();

}  // namespace anvil
