#include "core/util/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace anvil {
namespace {

std::atomic<LogSink> g_sink{nullptr};

LogSeverity ThresholdFromEnv() {
  const char* v = std::getenv("ANVIL_LOG_LEVEL");
  const std::string_view s = v != nullptr ? v : "";
  if (s == "debug") return LogSeverity::kDebug;
  if (s == "warning" || s == "warn") return LogSeverity::kWarning;
  if (s == "error") return LogSeverity::kError;
  return LogSeverity::kInfo;
}

}  // namespace

void set_log_sink(LogSink sink) { g_sink.store(sink); }

void engine_log(LogSeverity severity, const std::string& message) {
  if (LogSink sink = g_sink.load()) {
    sink(severity, message);
    return;
  }
  static const LogSeverity threshold = ThresholdFromEnv();
  if (severity < threshold) return;
  const std::string line = "anvil: " + message + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());  // one write: lines never interleave
}

}  // namespace anvil
