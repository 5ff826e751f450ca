// The engine's few log lines (the CPU and kernels it runs with, at start). A program with a
// logger of its own routes them there with set_log_sink (anvild does); by default they go to
// stderr as "anvil: ..." when at or above ANVIL_LOG_LEVEL (debug, info, warning, error;
// default info).
//
// Thread-safe.
#pragma once

#include <string>

namespace anvil {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

using LogSink = void (*)(LogSeverity severity, const std::string& message);
// nullptr restores the default (stderr, filtered by ANVIL_LOG_LEVEL).
void set_log_sink(LogSink sink);

void engine_log(LogSeverity severity, const std::string& message);

}  // namespace anvil
