// Fault points for the crash-consistency and fault tests: places where a write sequence
// (temporary file, fsync, rename, folder fsync; checkpoint rotation) could be cut by a power
// loss or kill -9, or where a request path can be made to hit a bug. One point is armed at a
// time, from the environment variable ANVIL_FAULT_POINT (read once, at the first point
// reached) or by set_fault_point():
//   <name>            the process exits at once there (_exit(86): no destructors, no flush),
//                     as if killed
//   <name>=internal   an InternalError is thrown there, as a broken invariant would (the
//                     service must answer INTERNAL)
//   <name>=fire       fault_point_fires(name) returns true there (the caller does the
//                     damage: a data-parallel test perturbs one rank's weights this way)
// Disarmed (always, outside those tests), a point costs one atomic load.
#pragma once

#include <string>

namespace anvil {

inline constexpr int kFaultPointExitCode = 86;

// Acts as the armed spec asks when it names `name`; otherwise returns. `file` and `line` are
// the caller's (the compilers' builtins: std::source_location needs a newer clang than the
// fuzz build's).
void fault_point(const char* name, const char* file = __builtin_FILE(), int line = __builtin_LINE());

// True when the armed spec is exactly "<name>=fire".
bool fault_point_fires(const std::string& name);

// Arms `spec` ("" disarms), replacing ANVIL_FAULT_POINT's; thread-safe (setenv is not, while
// other threads may be reaching points).
void set_fault_point(const std::string& spec);

}  // namespace anvil
