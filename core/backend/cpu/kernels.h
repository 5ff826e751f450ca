// The CPU backend's kernel families: what they share, and the slots by which each file
// registers its rows of the op table (core/backend/kernel_slots.h; the list: kernel_list.cc).
#pragma once

#include <cstdint>

#include "core/backend/kernel_slots.h"
#include "core/backend/registry.h"

namespace anvil::cpu {

// Every row's kernel slot (core/backend/kernel_slots.h), defined by the file of its family.
#define ANVIL_KERNEL_SLOT_ROW ANVIL_KERNEL_SLOT_DECLARATION
#include "core/backend/kernel_slot_rows.def"
#undef ANVIL_KERNEL_SLOT_ROW

// Multiply-adds from which a matrix product is split over the pool (rows of C). 2^18 (~5 µs
// of one core) lets a batch-256 classifier head (256x10x128) split: the batch-256 MLP step
// went ~7 % faster.
// It was 2^21 while the pool's worker spun without yielding; splits this small then kept
// it spinning next to the DataLoader's threads (see thread_pool.cc).
constexpr int64_t kGemmSplitWork = int64_t{1} << 18;

// Writes `src` (broadcast to dst's shape, converted to dst's dtype) into `dst`: the copy_
// kernel, for kernels that compute into a temporary or another layout first.
void CopyInto(const Tensor& dst, const Tensor& src);

}  // namespace anvil::cpu
