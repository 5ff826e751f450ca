// The CUDA backend's kernel list: one slot per row of the op table that has a kernel, each
// defined next to its kernel by the family file (core/backend/kernel_slots.h).
#include "core/backend/cuda/kernels.h"

namespace anvil::cuda {

KernelTable MakeKernelTable() {
  KernelTable t{};
#define ANVIL_KERNEL_SLOT_ROW ANVIL_KERNEL_SLOT_FILL
#include "core/backend/kernel_slot_rows.def"
#undef ANVIL_KERNEL_SLOT_ROW
  return t;
}

}  // namespace anvil::cuda
