// How the CUDA indexing kernels resolve writes that may land on the same element: scatter,
// scatter_add, index_add and index_put (with or without accumulate).
//
// Deterministic (the default): the kernel sorts its contributions by destination, stably, and
// applies each destination's contributions in the CPU kernel's loop order, so sums are
// bitwise reproducible (and equal to the CPU's up to the dtype's arithmetic) and a plain
// write keeps the last value, as the CPU's serial loop does. Costs one radix sort per call.
//
// Non-deterministic (opt-in): one pass of atomicAdd for float32, float64, int32 and int64
// (other dtypes keep the sorted path) and unordered plain writes, like PyTorch's default.
//
// Thread-safety: one process-wide atomic flag, read once per kernel call.
#pragma once

namespace anvil::cuda {

void set_deterministic_index_accumulate(bool deterministic);
bool deterministic_index_accumulate();

}  // namespace anvil::cuda
