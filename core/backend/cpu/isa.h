// The ISA level the CPU kernels run at: the level this CPU supports (core/util/cpu_features.h),
// or a lower one when ANVIL_CPU_ISA asks for it (generic, avx2, avx512, amx). Forcing a lower
// level runs the kernels other CPUs would run, so the test suite covers every path on any
// machine. A level above the CPU's is not taken: it is reported once on stderr and the CPU's
// own level is used. An unknown name is an anvil::Error from the first kernel that asks.
//
// Thread-safe. ScopedIsa is for tests: it lowers the level for the whole process while it
// lives, so no kernel may run concurrently on another thread.
#pragma once

#include "core/util/cpu_features.h"

namespace anvil::cpu {

// The level in effect now.
CpuIsa active_isa();
inline bool isa_at_least(CpuIsa level) { return static_cast<int>(active_isa()) >= static_cast<int>(level); }

// The level ANVIL_CPU_ISA asked for at start (the detected level when unset), and whether it
// was lowered by the variable.
CpuIsa requested_isa();

class ScopedIsa {
 public:
  // Throws anvil::Error when `level` is above what this CPU supports.
  explicit ScopedIsa(CpuIsa level);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  int previous_;
};

}  // namespace anvil::cpu
