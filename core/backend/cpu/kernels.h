// The CPU backend's kernel families; each file registers its rows of the op table.
#pragma once

#include "core/backend/registry.h"

namespace anvil::cpu {

void RegisterElementwiseKernels(KernelTable& t);
void RegisterReduceKernels(KernelTable& t);
void RegisterLinalgKernels(KernelTable& t);
void RegisterIndexKernels(KernelTable& t);
void RegisterShapeKernels(KernelTable& t);
void RegisterFillKernels(KernelTable& t);

}  // namespace anvil::cpu
