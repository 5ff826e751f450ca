// What the CPU kernels run with, as anvild's start line, /metrics (anvil_cpu_info),
// `anvil health --verbose` and every benchmark table name it.
#pragma once

#include <string>

#include "core/backend/kernel_report.h"  // CpuKernelInfo

namespace anvil {

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
