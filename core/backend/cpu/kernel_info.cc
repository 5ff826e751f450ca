#include "core/backend/cpu/kernel_info.h"

#include <mutex>
#include <string>

#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/bf16_gemm_amx.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/int8_gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/util/cpu_features.h"
#include "core/util/log.h"
#include "core/util/thread_pool.h"

namespace anvil {

CpuKernelInfo cpu_kernel_info() {
  const CpuFeatures& f = cpu_features();
  CpuKernelInfo info;
  info.model = f.model_name;
  info.vendor = f.vendor;
  info.family = f.family;
  info.model_id = f.model;
  info.features = f.flags();
  info.isa = std::string(isa_name(cpu::active_isa()));
  info.detected_isa = std::string(isa_name(detected_isa()));
  info.gemm = cpu::selected_gemm_description();
  info.bf16_gemm = cpu::bf16_gemm_kernel_name();
  info.int8_gemm = cpu::int8_gemm_kernel_name(cpu::selected_int8_gemm());
  info.threads = get_num_threads();
  info.available_cpus = available_cpu_threads();
  return info;
}

std::string cpu_kernel_summary() {
  const CpuKernelInfo i = cpu_kernel_info();
  std::string isa = i.isa;
  if (i.isa != i.detected_isa) isa += " (ANVIL_CPU_ISA; the CPU has " + i.detected_isa + ")";
  std::string out = "CPU " + i.model + " (" + i.vendor + " family " + std::to_string(i.family) + " model " +
                    std::to_string(i.model_id) + "; " + i.features + "), ISA " + isa + ", GEMM " + i.gemm +
                    ", bf16 GEMM " + i.bf16_gemm + ", int8 GEMM " + i.int8_gemm + ", " + std::to_string(i.threads) +
                    (i.threads == 1 ? " thread" : " threads") + " (" + std::to_string(i.available_cpus) +
                    " CPUs available)";
  const std::string& amx_reason = cpu_features().amx_unavailable_reason;
  if (!amx_reason.empty()) {
    out += "; no AMX: " + amx_reason;
  } else if (cpu_features().amx_bf16 && i.isa == "amx" && !cpu::amx_bf16_gemm_available()) {
    out += "; AMX bf16 GEMM off: " + cpu::amx_bf16_gemm_unavailable_reason();
  }
  return out;
}

void log_cpu_kernel_summary_once() {
  static std::once_flag once;
  std::call_once(once, [] { engine_log(LogSeverity::kInfo, cpu_kernel_summary()); });
}

}  // namespace anvil
