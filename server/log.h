// Leveled log lines on stderr: "2026-12-01T03:04:05.678Z INFO  message". Thread-safe (one
// write per line).
#pragma once

#include <string>
#include <string_view>

#include "core/util/error.h"

namespace anvil::server {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

void set_log_level(LogLevel level);
LogLevel parse_log_level(std::string_view name);  // debug, info, warning, error
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, const Args&... args) {
  log_line(level, detail::StrCat(args...));
}

}  // namespace anvil::server
