#include "core/backend/kernel_report.h"

#include "core/backend/cpu/kernel_info.h"

namespace anvil {

KernelReport kernel_report() {
  const CpuKernelInfo cpu = cpu_kernel_info();
  KernelReport r;
  r.cpu_model = cpu.model;
  r.cpu_features = cpu.features;
  r.isa = cpu.isa;
  r.detected_isa = cpu.detected_isa;
  r.gemm = cpu.gemm;
  r.bf16_gemm = cpu.bf16_gemm;
  r.int8_gemm = cpu.int8_gemm;
  r.threads = cpu.threads;
  r.available_cpus = cpu.available_cpus;
  return r;
}

void log_kernel_summary_once() { log_cpu_kernel_summary_once(); }

}  // namespace anvil
