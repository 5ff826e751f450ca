// Host reads counted per thread: the Tensor::item and Tensor::to_vector calls the calling
// thread has made. The training loop takes the difference around each step (StepMetrics::
// host_reads_per_step), which the doctor's HOST_SYNC_PER_STEP rule reads; unlike the
// process-wide host_value_reads() (tensor.h), other jobs' and threads' reads do not count.
//
// Thread-safety: each thread reads and advances only its own counter.
#pragma once

#include <cstdint>

namespace anvil {

int64_t host_value_reads_on_this_thread();

}  // namespace anvil
