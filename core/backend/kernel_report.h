// What runs in this process, asked without naming a backend: anvild's start line,
// GetServerInfo and /metrics (anvil_cpu_info) read it here, so the service never includes a
// backend's headers. Today the CPU backend answers (its ISA level and GEMMs); a device's
// kernels would join here.
// Thread-safety: free functions, safe to call from any thread.
#pragma once

#include <string>

namespace anvil {

struct KernelReport {
  std::string cpu_model;     // the CPU's brand string ("AMD EPYC", "Intel(R) Xeon(R) Processor")
  std::string cpu_features;  // "AVX2 FMA ... AVX512-BF16"
  std::string isa;           // the level the CPU kernels run at ("avx512")
  std::string detected_isa;  // the CPU's own level (differs when ANVIL_CPU_ISA lowers it)
  std::string gemm;          // the float32 GEMM: "anvil-avx512", "onednn (oneDNN 2.6.3)"
  std::string bf16_gemm;     // "anvil-amx-bf16 (tdpbf16ps)", "none ..."
  std::string int8_gemm;     // "anvil-amx-int8 (tdpbusd)", ...
  int threads = 1;           // the engine's intra-op threads
  int available_cpus = 1;    // the process's CPU affinity (and cgroup quota)
};

// Throws anvil::Error for a malformed ANVIL_CPU_ISA or ANVIL_GEMM.
KernelReport kernel_report();

// Logs the one-line summary (core/util/log.h) once per process: a program calls it at its
// start so its log names the CPU and kernels first.
void log_kernel_summary_once();

}  // namespace anvil
