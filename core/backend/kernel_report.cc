#include "core/backend/kernel_report.h"

#include "core/backend/cpu/kernel_info.h"

namespace anvil {

CpuKernelInfo kernel_report() { return cpu_kernel_info(); }

void log_kernel_summary_once() { log_cpu_kernel_summary_once(); }

}  // namespace anvil
