// The CPU backend's kernel families; each file registers its rows of the op table.
#pragma once

#include <cstdint>

#include "core/backend/registry.h"

namespace anvil::cpu {

// Multiply-adds from which a matrix product is split over the pool (rows of C). 2^18 (~5 µs
// of one core) lets a batch-256 classifier head (256x10x128) split: the batch-256 MLP step
// went ~7 % faster.
// It was 2^21 while the pool's worker spun without yielding; splits this small then kept
// it spinning next to the DataLoader's threads (see thread_pool.cc).
constexpr int64_t kGemmSplitWork = int64_t{1} << 18;

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
