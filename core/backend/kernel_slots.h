// One kernel list per backend, filled by row. Each backend declares a slot function for every
// row of the op table that has a kernel (core/backend/kernel_slot_rows.def, expanded in its
// kernels.h), each family file of the backend defines the slots of its rows next to their
// kernels with ANVIL_KERNEL_SLOT, and the backend's kernel_list.cc fills its table by walking
// the op table once. So a row is registered where its kernel is written, a backend cannot
// forget one (it does not link), and there is no per-family registration function to call.
#pragma once

#include "core/backend/registry.h"

// Defines row `Id`'s slot as the kernel named by the rest of the arguments (a template
// kernel's arguments may hold commas). Used in the backend's namespace, outside any
// anonymous one: the slot is what the backend's kernel list links against.
#define ANVIL_KERNEL_SLOT(Id, ...) \
  KernelFn kernel_slot_##Id() { return &__VA_ARGS__; }

// In a backend's kernels.h, inside its namespace: declares every row's slot.
#define ANVIL_KERNEL_SLOT_DECLARATION(Id) KernelFn kernel_slot_##Id();
// In a backend's kernel_list.cc, in a function with a KernelTable `t`: fills every row.
#define ANVIL_KERNEL_SLOT_FILL(Id) t[static_cast<int>(OpId::Id)] = kernel_slot_##Id();
