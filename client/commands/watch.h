// Following a job's metrics to its end: `anvil watch ID` and `anvil submit --watch`.
#pragma once

#include <cstdint>
#include <string>

#include "client/commands/context.h"

namespace anvil::client {

// Prints the job's metric events (a progress line, or JSON lines with --json) until the job
// ends, reconnecting (from the next step) when the stream breaks. Returns the final state.
v1::JobState follow_job(Context& cli, const std::string& id, int64_t from_step);

}  // namespace anvil::client
