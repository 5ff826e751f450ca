#include "workers/job_memory.h"

#include <absl/strings/str_format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/util/error.h"
#include "core/util/saturating.h"

namespace anvil::workers {
namespace {

int64_t OptimizerSlots(const v1::OptimizerSpec& o) {
  if (o.name() == "adam" || o.name() == "adamw" || o.name().empty()) return 2;
  if (o.name() == "rmsprop") return o.momentum() > 0 ? 2 : 1;
  return o.momentum() > 0 ? 1 : 0;  // sgd
}

}  // namespace

int64_t JobMemory::total() const {
  return sat_add(sat_add(sat_add(weights, gradients), sat_add(optimizer_state, activations)), checkpoint);
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024) return absl::StrFormat("%.1f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  if (b >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.1f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return absl::StrFormat("%.0f MiB", b / (1024.0 * 1024));
  return absl::StrFormat("%.0f KiB", b / 1024.0);
}

std::string JobMemory::describe(const std::string& optimizer) const {
  return detail::StrCat("about ", format_bytes(total()), ": weights ", format_bytes(weights), ", gradients ",
                        format_bytes(gradients), ", ", optimizer.empty() ? "adamw" : optimizer, " state ",
                        format_bytes(optimizer_state), ", activations of one batch ", format_bytes(activations),
                        ", checkpoint copy ", format_bytes(checkpoint));
}

JobMemory estimate_job_memory(const models::ModelCost& cost, const v1::JobSpec& spec) {
  constexpr int64_t kFloat = 4;
  JobMemory m;
  m.weights = sat_mul(kFloat, sat_add(cost.parameters, cost.buffers));
  m.gradients = sat_mul(kFloat, cost.parameters);
  m.optimizer_state = sat_mul(sat_mul(kFloat, cost.parameters), OptimizerSlots(spec.optimizer()));
  const int64_t batch = std::max<int64_t>(spec.batch_size(), 1);
  // Forward values and their gradients in the backward pass.
  m.activations = sat_mul(sat_mul(2 * kFloat, cost.activations_per_sample), batch);
  // A checkpoint serialises weights and optimizer state into one buffer before it is written.
  m.checkpoint = sat_add(m.weights, m.optimizer_state);
  return m;
}

void check_job_memory(const models::ModelCost& cost, const v1::JobSpec& spec, int64_t budget_bytes) {
  if (budget_bytes <= 0) return;
  const JobMemory m = estimate_job_memory(cost, spec);
  ANVIL_CHECK(m.total() <= budget_bytes, "the job needs ", m.describe(spec.optimizer().name()), " (", cost.parameters,
              " parameters, batch ", spec.batch_size(), "); this server allows ", format_bytes(budget_bytes),
              " per job (anvild --max-job-memory)");
}

int64_t default_job_memory_budget(std::string* basis) {
  int64_t limit = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  std::string from = "physical memory";
  // cgroup v2 (containers, systemd's MemoryMax=): "max" or a byte count.
  if (std::ifstream in("/sys/fs/cgroup/memory.max"); in) {
    std::string v;
    in >> v;
    if (!v.empty() && v != "max") {
      const int64_t cg = std::stoll(v);
      if (cg > 0 && cg < limit) {
        limit = cg;
        from = "the cgroup's memory.max";
      }
    }
  }
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(as.rlim_cur) < limit) {
    limit = static_cast<int64_t>(as.rlim_cur);
    from = "RLIMIT_AS";
  }
  if (basis != nullptr) *basis = detail::StrCat("half of ", format_bytes(limit), " (", from, ")");
  return limit / 2;
}

}  // namespace anvil::workers
