// The CPU backend's kernel families; each file registers its rows of the op table.
#pragma once

#include "core/backend/registry.h"

namespace anvil::cpu {

void RegisterElementwiseKernels(KernelTable& t);

// Writes `src` (broadcast to dst's shape, converted to dst's dtype) into `dst`: the copy_
// kernel, for kernels that compute into a temporary or another layout first.
void CopyInto(const Tensor& dst, const Tensor& src);
void RegisterReduceKernels(KernelTable& t);
void RegisterLinalgKernels(KernelTable& t);
void RegisterIndexKernels(KernelTable& t);
void RegisterShapeKernels(KernelTable& t);
void RegisterFillKernels(KernelTable& t);
void RegisterIm2ColKernels(KernelTable& t);
void RegisterConvKernels(KernelTable& t);
void RegisterOptimizerStepKernels(KernelTable& t);
void RegisterLossKernels(KernelTable& t);

}  // namespace anvil::cpu
