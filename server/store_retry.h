// Waiting out a store that cannot be reached: a PostgreSQL server restarting, a network cut.
// A job's progress must not be lost because its database was away for a few seconds, so the
// writes that record it wait for the store to answer again instead of dropping the event.
//
// Only StoreError kIo waits (the connection was lost: the store reconnects on the next call);
// every other error is thrown at once. A statement whose outcome is unknown (the connection
// broke after the server received it) may run twice: callers use this for writes that are
// idempotent (update_job) or whose repetition is harmless (a metric event, at worst twice).
//
// Thread-safety: a free function; it blocks the calling thread while it waits.
#pragma once

#include <algorithm>
#include <chrono>
#include <string_view>
#include <thread>

#include "server/log.h"
#include "server/store.h"

namespace anvil::server {

// Calls f() until it returns, waiting 50 ms, then twice as long up to 2 s, after each kIo
// failure; after `limit` of failures the last one is thrown.
template <class F>
auto retry_while_unavailable(std::string_view what, std::chrono::milliseconds limit, F&& f) -> decltype(f()) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::chrono::milliseconds pause(50);
  bool waited = false;
  for (;;) {
    try {
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        if (waited) log(LogLevel::kInfo, "the job store answers again (", what, ")");
        return;
      } else {
        auto out = f();
        if (waited) log(LogLevel::kInfo, "the job store answers again (", what, ")");
        return out;
      }
    } catch (const StoreError& e) {
      if (e.kind() != StoreError::Kind::kIo || std::chrono::steady_clock::now() >= until) throw;
      if (!waited) log(LogLevel::kWarning, "waiting for the job store to ", what, ": ", e.what());
      waited = true;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(2));
  }
}

}  // namespace anvil::server
