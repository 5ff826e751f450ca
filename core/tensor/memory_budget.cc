#include "core/tensor/memory_budget.h"

#include <cstdio>
#include <utility>

#include "core/util/error.h"

namespace anvil {

namespace {
std::shared_ptr<MemoryBudget>& ThreadBudget() {
  thread_local std::shared_ptr<MemoryBudget> budget;
  return budget;
}
}  // namespace

std::string describe_bytes(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " bytes";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

MemoryBudget::MemoryBudget(int64_t limit_bytes, std::string what, std::string hint)
    : limit_(limit_bytes), what_(std::move(what)), hint_(std::move(hint)) {
  ANVIL_CHECK(limit_bytes > 0, "a memory budget must be positive, got ", limit_bytes, " bytes");
}

void MemoryBudget::charge(int64_t bytes) {
  int64_t live = live_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ - live) {
      throw OutOfMemoryError(detail::StrCat(what_, " would hold more than ", describe_bytes(limit_),
                                            " of tensors at once: it held ", describe_bytes(live), " and asked for ",
                                            describe_bytes(bytes), " more",
                                            hint_.empty() ? std::string() : " (the limit: " + hint_ + ")"));
    }
  } while (!live_.compare_exchange_weak(live, live + bytes, std::memory_order_relaxed));
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live + bytes > peak && !peak_.compare_exchange_weak(peak, live + bytes, std::memory_order_relaxed)) {
  }
}

void MemoryBudget::release(int64_t bytes) noexcept { live_.fetch_sub(bytes, std::memory_order_relaxed); }

MemoryBudgetScope::MemoryBudgetScope(std::shared_ptr<MemoryBudget> budget)
    : previous_(std::exchange(ThreadBudget(), std::move(budget))) {}

MemoryBudgetScope::~MemoryBudgetScope() { ThreadBudget() = std::move(previous_); }

const std::shared_ptr<MemoryBudget>& current_memory_budget() { return ThreadBudget(); }

}  // namespace anvil
