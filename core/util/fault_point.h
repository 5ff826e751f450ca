// Fault points for the crash-consistency and fault tests: places where a write sequence
// (temporary file, fsync, rename, folder fsync; checkpoint rotation) could be cut by a power
// loss or kill -9, or where a request path can be made to hit a bug. The environment variable
// ANVIL_FAULT_POINT selects one:
//   ANVIL_FAULT_POINT=<name>            the process exits at once there (_exit(86): no
//                                       destructors, no flush), as if killed
//   ANVIL_FAULT_POINT=<name>=internal   an InternalError is thrown there, as a broken
//                                       invariant would (the service must answer INTERNAL)
// Unset (always, outside those tests), a point costs one getenv.
#pragma once

#include <source_location>

namespace anvil {

inline constexpr int kFaultPointExitCode = 86;

// Acts as ANVIL_FAULT_POINT asks when it names `name`; otherwise returns.
void fault_point(const char* name, std::source_location where = std::source_location::current());

}  // namespace anvil
