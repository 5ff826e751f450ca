#include "core/backend/cuda/runtime.h"

#include <cublas_v2.h>

#include <array>
#include <atomic>

#include "core/backend/cuda/blas.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/util/error.h"

namespace anvil::cuda {
namespace {

constexpr int kMaxDevices = 64;
thread_local std::array<cudaStream_t, kMaxDevices> tls_streams{};  // nullptr: legacy default

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& GetProbe() {
  static const Probe probe = [] {
    Probe p;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky error so later calls start clean
      p.reason = e == cudaErrorInsufficientDriver ? "no CUDA driver (or one older than this build's CUDA)"
                 : e == cudaErrorNoDevice         ? "no CUDA device"
                                                  : std::string("CUDA is not usable: ") + cudaGetErrorString(e);
      return p;
    }
    p.count = std::min(n, kMaxDevices);
    if (p.count == 0) p.reason = "no CUDA device";
    return p;
  }();
  return probe;
}

void CheckDevice(int device) {
  ANVIL_CHECK(device >= 0 && device < device_count(), "cuda:", device, " does not exist (",
              device_count() == 0 ? unavailable_reason() : std::to_string(device_count()) + " CUDA device(s)", ")");
}

}  // namespace

[[noreturn]] void ThrowCudaError(cudaError_t error, const char* expr, const char* file, int line) {
  if (error == cudaErrorMemoryAllocation) {
    throw OutOfMemoryError(detail::StrCat("CUDA out of memory in ", expr, " (", file, ":", line, ")"));
  }
  throw Error(detail::StrCat("CUDA error ", cudaGetErrorName(error), ": ", cudaGetErrorString(error), " in ", expr,
                             " (", file, ":", line, ")"));
}

[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* expr, const char* file, int line) {
  throw Error(detail::StrCat("cuBLAS error ", cublas().status_name(status), ": ", cublas().status_string(status),
                             " in ", expr, " (", file, ":", line, ")"));
}

int device_count() { return GetProbe().count; }
const std::string& unavailable_reason() { return GetProbe().reason; }

cudaStream_t current_stream(int device) {
  CheckDevice(device);
  return tls_streams[device];
}

cudaStream_t create_stream(int device) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  ANVIL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
  return s;
}

namespace {
std::atomic<int64_t> g_host_waits{0};
}  // namespace

void wait_for_stream(cudaStream_t stream) {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  ANVIL_CUDA_CHECK(cudaStreamSynchronize(stream));
}

int64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

void synchronize_stream(int device) {
  DeviceGuard guard(device);
  wait_for_stream(current_stream(device));
}

EventId record_event(StreamId stream) {
  cudaEvent_t e = nullptr;
  ANVIL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ANVIL_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
  return reinterpret_cast<EventId>(e);
}

bool event_completed(EventId event) {
  const cudaError_t e = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  ANVIL_CUDA_CHECK(e);
  return true;
}

void destroy_event(EventId event) { ANVIL_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event))); }

DeviceGuard::DeviceGuard(int device) {
  CheckDevice(device);
  ANVIL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) ANVIL_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device) {
  CheckDevice(device);
  previous_ = tls_streams[device];
  tls_streams[device] = stream;
}

StreamGuard::~StreamGuard() { tls_streams[device_] = previous_; }

}  // namespace anvil::cuda
