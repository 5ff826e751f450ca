// Crash points for the crash-consistency tests: where a write sequence (temporary file, fsync,
// rename, folder fsync; checkpoint rotation) could be cut by a power loss or kill -9. When the
// environment variable ANVIL_FAULT_POINT names a point, the process exits at once there
// (_exit(86): no destructors, no flush), as if killed. Unset (always, outside those tests), a
// point costs one getenv on paths that also fsync.
#pragma once

namespace anvil {

inline constexpr int kFaultPointExitCode = 86;

// Exits the process with kFaultPointExitCode when ANVIL_FAULT_POINT equals `name`.
void fault_point(const char* name);

}  // namespace anvil
