// The CPU-heavy part of a call (a dry run's whole plan, an ONNX export's capture and
// verification, an uploaded model's conversion, a quantization's calibration and evaluation)
// runs on the server's work pool, never on gRPC's threads nor on the call pool's:
//   - at most RequestLimits::max_concurrent_heavy_work such jobs run at once, whatever the
//     number of calls, so a crowd of exports cannot take every core and the memory each
//     capture holds; max_heavy_work_queue more wait, and beyond them the call is refused with
//     RESOURCE_EXHAUSTED;
//   - the call pool stays free for the cheap calls (ListJobs, GetJob, KServe metadata), which
//     answer in milliseconds while heavy work queues;
//   - a call whose client gave up (its deadline passed, or it cancelled) while its work waited
//     is answered CANCELLED without doing the work; one whose client gives up while it runs
//     stops at the work's next phase (a dry run after its data, after its model; a verified
//     export after its capture; a quantization before its calibration), or inside a large
//     data load, so the rest is not done for nobody.
// Unary calls hand the whole call over (serve_method_heavy in server/unary_call.h); streaming
// calls wait for their work on their own stream-pool thread (run_heavy_work).
// Thread-safety: free functions over a thread-safe pool.
#pragma once

#include <absl/status/status.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <string_view>

#include "core/util/interruption.h"
#include "server/bounded_executor.h"

namespace anvil::server {

// What the work pool's refusal calls its tasks ("too many <calls> at once").
inline constexpr const char* kHeavyWorkCalls = "heavy calls (dry runs, quantizations, ONNX exports, model uploads)";

// Runs `work` on `pool` and returns when it has run, rethrowing what it threw. Throws
// ServiceError: RESOURCE_EXHAUSTED when the pool's queue is full, CANCELLED when the client
// gave up before the work started.
void run_heavy_work(BoundedExecutor& pool, const grpc::ServerContextBase& ctx, const std::function<void()>& work);

// The test hook every heavy job passes first: the fault point "heavy_work:slow=fire" makes
// each take one second (server tests use it to keep the work pool busy). One atomic load
// when disarmed.
void heavy_work_fault_point();

// CANCELLED for a call whose client left while its work waited for the pool (counted as
// abandoned while queued).
absl::Status heavy_work_abandoned();

// Called by heavy work between its phases: throws ServiceError CANCELLED, naming `call` and
// the phase `done`, when the call was cancelled (its client left, or the server cancelled it
// at shutdown; counted as abandoned while running); returns otherwise. A cheap check: gRPC's
// IsCancelled, one short lock.
void stop_if_abandoned(const grpc::ServerContextBase& ctx, std::string_view call, std::string_view done);

// Installs, for the returned object's scope on the calling thread, an interruption check
// (core/util/interruption.h) that runs stop_if_abandoned(ctx, call, "part of its data") inside
// the engine's long loops: a large table's read and parse, an image folder's walk, stop within
// a few tens of milliseconds of the call's cancellation rather than after the whole load.
[[nodiscard]] ScopedInterruptionCheck stop_inside_loops_if_abandoned(const grpc::ServerContextBase& ctx,
                                                                     std::string_view call);

// Heavy calls given up because they were cancelled (their client left, or the server ended
// them), since the process started (every server in it): before their work began, and between
// its phases. anvil_heavy_work_abandoned_total
// exposes them.
struct AbandonedHeavyWork {
  int64_t queued = 0;
  int64_t running = 0;
};
AbandonedHeavyWork abandoned_heavy_work();

}  // namespace anvil::server
