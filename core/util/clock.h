// Wall-clock time as Unix milliseconds: the timestamps of jobs, metric events and models.
#pragma once

#include <chrono>
#include <cstdint>

namespace anvil {

inline int64_t unix_millis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace anvil
