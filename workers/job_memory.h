// What a job will hold in memory while it trains, estimated from its spec before anything is
// built: weights, their gradients, the optimizer's per-parameter state, the activations one
// batch keeps for its backward pass, and the checkpoint's serialised copy. A job over the
// server's budget is refused at submit (or fails at plan time for a preset, whose size depends
// on the data) with this breakdown, instead of being found by the OOM killer.
#pragma once

#include <cstdint>
#include <string>

#include "core/models/spec.h"
#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::workers {

struct JobMemory {
  int64_t weights = 0, gradients = 0, optimizer_state = 0, activations = 0, checkpoint = 0;  // bytes
  int64_t total() const;
  // "about 6.4 GB: weights 1.6 GB, gradients 1.6 GB, adamw state 3.2 GB, ..."
  std::string describe(const std::string& optimizer) const;
};

// float32 throughout; optimizer state: adam/adamw 2 slots per parameter,
// rmsprop 1 (2 with momentum), sgd 1 with momentum else 0.
JobMemory estimate_job_memory(const models::ModelCost& cost, const v1::JobSpec& spec);

// Throws anvil::Error with the breakdown when the estimate exceeds `budget_bytes` (<= 0: no limit).
void check_job_memory(const models::ModelCost& cost, const v1::JobSpec& spec, int64_t budget_bytes);

// The default per-job budget: half of the memory this process may use (the smallest of the
// physical memory, the cgroup's memory.max and RLIMIT_AS), and a line saying so.
int64_t default_job_memory_budget(std::string* basis = nullptr);

// "1.5 GiB", "312 MiB": for messages.
std::string format_bytes(int64_t bytes);

}  // namespace anvil::workers
