// Which rows of the op table ran: the conformance suite (tests/conformance) walks the table
// with it to find rows that no case reaches. Off unless an OpTrace is alive; then every op
// dispatched, view made and fused step run, on any thread, marks its row. Costs one relaxed
// atomic load per op when off.
#pragma once

#include <array>
#include <atomic>

#include "core/ops/op_table.h"

namespace anvil {

class OpTrace {
 public:
  // Starts tracing (one trace at a time: a second is an error).
  OpTrace();
  ~OpTrace();
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  bool seen(OpId op) const { return seen_[static_cast<int>(op)].load(std::memory_order_relaxed); }
  void mark(OpId op) { seen_[static_cast<int>(op)].store(true, std::memory_order_relaxed); }

 private:
  std::array<std::atomic<bool>, kNumOps> seen_{};
};

namespace detail {
extern std::atomic<OpTrace*> g_op_trace;
inline void trace_op(OpId op) {
  if (OpTrace* t = g_op_trace.load(std::memory_order_relaxed)) t->mark(op);
}
}  // namespace detail

}  // namespace anvil
