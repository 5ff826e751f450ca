// The CUDA runtime as the rest of the engine sees it: how many devices there are (zero,
// never a crash, when the driver or the GPU is missing), which stream work goes to, and
// guards that switch device and stream for a scope.
//
// Streams: each thread has a current stream per device, the legacy default stream unless a
// StreamGuard says otherwise (a device worker sets its own stream for its whole life). Ops
// are queued on the current stream and run asynchronously; the host waits only where it
// reads a value (item(), a copy to the CPU).
//
// Thread-safety: device_count() is computed once; the current stream is thread-local.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/backend/cuda/device_memory.h"

namespace anvil::cuda {

// Devices usable by this process; 0 when CUDA is not usable (see unavailable_reason()).
int device_count();
// Why device_count() is 0 ("no CUDA driver", "no CUDA device", ...); "" when it is not.
const std::string& unavailable_reason();

cudaStream_t current_stream(int device);
// A new stream on `device` that orders after the legacy default stream (so work queued on
// the default stream by code that knows no better is never overtaken).
cudaStream_t create_stream(int device);
// Waits for all work queued on `device`'s current stream.
void synchronize_stream(int device);
// The host blocking until `stream`'s queued work is done. Every wait of the engine on the GPU
// (a value read back, a copy to the host, a peer copy) goes through here, so host_waits()
// counts them process-wide: a test can assert that a training loop makes none per step.
void wait_for_stream(cudaStream_t stream);
int64_t host_waits();

// Events as the allocators use them, behind their EventId: a new event (timing disabled)
// recorded at the current end of `stream`'s queued work, on the current device; whether one
// has completed (never blocks); and its release.
EventId record_event(StreamId stream);
bool event_completed(EventId event);
void destroy_event(EventId event);

// Makes `device` current for the calling thread for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Makes `stream` the calling thread's current stream on `device` for a scope.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

}  // namespace anvil::cuda
