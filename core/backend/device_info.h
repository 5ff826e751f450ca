// What the trainer and the service read about a device beside its kernels: its allocator's
// peak restarted for one run, and a GPU's PCI bus id (how NVML names it).
//
// Thread-safety: both are safe from any thread (the allocators are thread-safe).
#pragma once

#include <string>

#include "core/tensor/device.h"

namespace anvil {

// Restarts the peak of `device`'s allocator (AllocatorStats::peak_allocated_bytes) from what is
// allocated now, so that a run measures its own; a no-op on the CPU, whose allocator is the
// process's and shared by every job.
void reset_peak_memory(Device device);

// cuda:`device`'s PCI bus id ("0000:3B:00.0", as NVML names it: the same GPU whatever order
// CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER give the devices); "" when it cannot be read.
std::string cuda_pci_bus_id(int device);

}  // namespace anvil
