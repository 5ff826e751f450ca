// What the CPU kernels run with, as anvild's start line, /metrics (anvil_cpu_info),
// `anvil health --verbose` and every benchmark table name it.
#pragma once

#include <string>

namespace anvil {

struct CpuKernelInfo {
  std::string model;   // the CPU's brand string ("AMD EPYC", "Intel(R) Xeon(R) Processor")
  std::string vendor;  // "AuthenticAMD"
  int family = 0, model_id = 0;
  std::string features;      // "AVX2 FMA ... AVX512-BF16"
  std::string isa;           // the level the kernels run at ("avx512")
  std::string detected_isa;  // the CPU's own level (isa differs when ANVIL_CPU_ISA lowers it)
  std::string gemm;          // "anvil-avx512", "openblas (SkylakeX)"
  std::string bf16_gemm;     // "anvil-avx512-bf16 (vdpbf16ps)", "anvil-amx-bf16 (tdpbf16ps)", "none ..."
  std::string int8_gemm;     // "anvil-avx512-vnni (vpdpbusd)", "anvil-amx-int8 (tdpbusd)", ...
  int threads = 1;           // the engine's intra-op threads
  int available_cpus = 1;    // the process's CPU affinity (and cgroup quota)
};

// Loads the BLAS library the float32 GEMM uses, if not loaded yet. Throws anvil::Error for a
// malformed ANVIL_CPU_ISA or ANVIL_GEMM.
CpuKernelInfo cpu_kernel_info();

// One line: "CPU AMD EPYC (AuthenticAMD family 26 model 2), ISA avx512 (AVX2 FMA ...), GEMM
// anvil-avx512, bf16 GEMM anvil-avx512-bf16 (vdpbf16ps), int8 GEMM anvil-avx512-vnni (vpdpbusd),
// 2 threads (2 CPUs available)".
std::string cpu_kernel_summary();

// Logs the summary (core/util/log.h) the first time it is called in the process: the CPU
// backend calls it when it starts, and so may a program that wants the line at its own start.
void log_cpu_kernel_summary_once();

}  // namespace anvil
