// The CUDA backend's kernel families; each file registers its rows of the op table. Rows
// left empty answer "op 'x' has no kernel for device cuda:N" (the parity test lists them).
#pragma once

#include "core/backend/registry.h"

namespace anvil::cuda {

void RegisterElementwiseKernels(KernelTable& t);
void RegisterFillKernels(KernelTable& t);
void RegisterReduceKernels(KernelTable& t);
void RegisterLinalgKernels(KernelTable& t);
void RegisterSoftmaxKernels(KernelTable& t);
void RegisterIndexKernels(KernelTable& t);
void RegisterShapeKernels(KernelTable& t);
void RegisterConvKernels(KernelTable& t);
void RegisterOptimizerStepKernels(KernelTable& t);
void RegisterLossKernels(KernelTable& t);

}  // namespace anvil::cuda
