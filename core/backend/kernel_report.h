// What runs in this process, asked without naming a backend: anvild's start line,
// GetServerInfo and /metrics (anvil_cpu_info) read it here, so the service never includes a
// backend's headers. Today the CPU backend answers (its ISA level and GEMMs); a device's
// kernels would join here.
// Thread-safety: free functions, safe to call from any thread.
#pragma once

#include <string>

namespace anvil {

// The host CPU and the kernels the CPU backend runs on it.
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

// Throws anvil::Error for a malformed ANVIL_CPU_ISA or ANVIL_GEMM.
CpuKernelInfo kernel_report();

// Logs the one-line summary (core/util/log.h) once per process: a program calls it at its
// start so its log names the CPU and kernels first.
void log_kernel_summary_once();

}  // namespace anvil
