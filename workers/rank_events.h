// A data-parallel job's rank 0 reports to its anvild over a pipe: one JSON object per line,
// each a WorkerEvent. The rank processes are anvild's own children (workers/rank_group.h),
// so this is a parent-child channel, not a network protocol.
#pragma once

#include <string>

#include "workers/worker.h"

namespace anvil::workers {

// One line (no newline) holding `e`.
std::string encode_rank_event(const WorkerEvent& e);
// The event of a line written by encode_rank_event; throws on a malformed line.
WorkerEvent decode_rank_event(const std::string& line);

}  // namespace anvil::workers
