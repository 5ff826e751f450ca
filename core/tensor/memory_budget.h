// A bound on the tensor memory one piece of work holds at once: a Predict's forward on a
// served model (whose graph, when imported, is the client's), so no single request can take
// the process's memory, whatever its graph makes.
//
// While a MemoryBudgetScope is active on a thread, every Storage allocated on that thread
// (tensors, their gradients, whatever an op returns; views share their storage and count
// once) is charged to the budget before its bytes are asked for, and released when the
// storage dies, on whichever thread that happens. A charge beyond the limit throws
// OutOfMemoryError (the service answers RESOURCE_EXHAUSTED) before any memory is touched.
//
// What it does not see: scratch buffers kernels keep outside Storage (packing buffers,
// per-thread workspaces: bounded by the kernels themselves), and storage allocated on other
// threads (the intra-op pool's tasks write into outputs allocated by the caller).
//
// Thread-safe: a budget may be charged and released from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace anvil {

class MemoryBudget {
 public:
  // `what` names the work in the error ("this Predict's forward"); `hint` says how to change
  // the limit ("--max-predict-memory").
  MemoryBudget(int64_t limit_bytes, std::string what, std::string hint = "");

  int64_t limit() const { return limit_; }
  int64_t live() const { return live_.load(std::memory_order_relaxed); }  // charged, not released
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

  // Adds `bytes`; throws OutOfMemoryError (and adds nothing) when live() would pass limit().
  void charge(int64_t bytes);
  void release(int64_t bytes) noexcept;

 private:
  const int64_t limit_;
  const std::string what_, hint_;
  std::atomic<int64_t> live_{0}, peak_{0};
};

// Installs `budget` on this thread until destroyed; the previous one (if any) returns then.
// Scopes nest: the innermost budget is charged.
class MemoryBudgetScope {
 public:
  explicit MemoryBudgetScope(std::shared_ptr<MemoryBudget> budget);
  ~MemoryBudgetScope();
  MemoryBudgetScope(const MemoryBudgetScope&) = delete;
  MemoryBudgetScope& operator=(const MemoryBudgetScope&) = delete;

 private:
  std::shared_ptr<MemoryBudget> previous_;
};

// The budget storage allocated on this thread is charged to (null: none).
const std::shared_ptr<MemoryBudget>& current_memory_budget();

// "1.5 GiB", "640 KiB", "12 bytes": for messages.
std::string describe_bytes(int64_t bytes);

}  // namespace anvil
