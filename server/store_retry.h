// Waiting out a store that cannot be reached: a PostgreSQL server restarting, a network cut.
// A job's progress must not be lost because its database was away for a few seconds, so the
// writes that record it wait for the store to answer again instead of dropping the event.
//
// Only StoreError kIo (ArtifactError kUnavailable) waits (the connection was lost: the store reconnects on the next
// call); every other error is thrown at once. A statement whose outcome is unknown (the connection broke after the
// server received it) may run twice: callers use this for writes that are idempotent (update_job) or whose repetition
// is harmless (a metric event, at worst twice).
//
// Thread-safety: a free function; it blocks the calling thread while it waits.
#pragma once

#include <algorithm>
#include <chrono>
#include <string_view>
#include <thread>

#include "server/artifacts/artifact_store.h"
#include "server/log.h"
#include "server/store.h"

namespace anvil::server {

namespace retry_detail {

// Calls f() until it returns, waiting 50 ms, then twice as long up to 2 s, after each failure
// of type E that `transient` accepts; after `limit` of failures the last one is thrown.
template <class E, class Transient, class F>
auto retry_while(std::string_view what, std::string_view who, std::chrono::milliseconds limit, Transient transient,
                 F&& f) -> decltype(f()) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::chrono::milliseconds pause(50);
  bool waited = false;
  for (;;) {
    try {
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        if (waited) log(LogLevel::kInfo, who, " answers again (", what, ")");
        return;
      } else {
        auto out = f();
        if (waited) log(LogLevel::kInfo, who, " answers again (", what, ")");
        return out;
      }
    } catch (const E& e) {
      if (!transient(e) || std::chrono::steady_clock::now() >= until) throw;
      if (!waited) log(LogLevel::kWarning, "waiting for ", who, " to ", what, ": ", e.what());
      waited = true;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(2));
  }
}

}  // namespace retry_detail

// Calls f() until it returns, retrying StoreError kIo (the store reconnects on the next call)
// for up to `limit`.
template <class F>
auto retry_while_unavailable(std::string_view what, std::chrono::milliseconds limit, F&& f) -> decltype(f()) {
  return retry_detail::retry_while<StoreError>(
      what, "the job store", limit, [](const StoreError& e) { return e.kind() == StoreError::Kind::kIo; },
      std::forward<F>(f));
}

// The same for the artifact store: ArtifactError kUnavailable (an object store restarting).
template <class F>
auto retry_while_artifacts_unavailable(std::string_view what, std::chrono::milliseconds limit, F&& f) -> decltype(f()) {
  return retry_detail::retry_while<ArtifactError>(
      what, "the artifact store", limit,
      [](const ArtifactError& e) { return e.kind() == ArtifactError::Kind::kUnavailable; }, std::forward<F>(f));
}

}  // namespace anvil::server
