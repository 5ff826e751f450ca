#include "core/backend/cpu/kernels.h"

namespace anvil {

void RegisterCpuKernels(KernelTable& table) {
  cpu::RegisterElementwiseKernels(table);
  cpu::RegisterReduceKernels(table);
  cpu::RegisterLinalgKernels(table);
  cpu::RegisterIndexKernels(table);
  cpu::RegisterShapeKernels(table);
  cpu::RegisterFillKernels(table);
  cpu::RegisterIm2ColKernels(table);
  cpu::RegisterConvKernels(table);
  cpu::RegisterOptimizerStepKernels(table);
  cpu::RegisterLossKernels(table);
}

}  // namespace anvil
