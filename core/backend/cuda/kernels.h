// The CUDA backend's kernel families: the slots by which each file registers its rows of the
// op table (core/backend/kernel_slots.h; the list: kernel_list.cc, MakeKernelTable).
#pragma once

#include "core/backend/kernel_slots.h"
#include "core/backend/registry.h"

namespace anvil::cuda {

// Every row's kernel slot (core/backend/kernel_slots.h), defined by the file of its family.
#define ANVIL_KERNEL_SLOT_ROW ANVIL_KERNEL_SLOT_DECLARATION
#include "core/backend/kernel_slot_rows.def"
#undef ANVIL_KERNEL_SLOT_ROW

// The kernel table of every CUDA device: each row's slot.
KernelTable MakeKernelTable();

}  // namespace anvil::cuda
