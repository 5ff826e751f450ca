// Primitive ops counted per thread: the op-table rows the calling thread has run, the ops a
// kernel runs inside itself excluded. The training loop takes the difference around each step
// (StepMetrics::ops_per_step) for the doctor's OVERHEAD_BOUND: a step of many small ops is
// bound by their dispatch, not by its arithmetic.
//
// Thread-safety: each thread reads and advances only its own counter.
#pragma once

#include <cstdint>

namespace anvil {

int64_t ops_dispatched_on_this_thread();

}  // namespace anvil
