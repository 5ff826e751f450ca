#include "server/log.h"

#include <absl/strings/str_format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace anvil::server {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  throw Error("log level: expected debug, info, warning or error, got \"" + std::string(name) + "\"");
}

void log_line(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* kNames[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  const std::string line =
      absl::StrFormat("%s.%03dZ %s %s\n", stamp, static_cast<int>(ms), kNames[static_cast<int>(level)], message);
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace anvil::server
