// Which rows of the op table ran: the conformance suite (tests/conformance) walks the table
// with it to find rows that no case reaches. Off unless an OpTrace is alive and enabled; then
// every op dispatched (with a kernel), view made and fused step run, on any thread, marks its
// row. Costs one atomic load per op when off. Ops must stop before the trace is destroyed.
//
// Thread-safety: rows are marked from any thread (atomics); make, enable and read a trace on
// one thread.
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
  void mark(OpId op) {
    if (enabled_.load(std::memory_order_relaxed)) seen_[static_cast<int>(op)].store(true, std::memory_order_relaxed);
  }
  // Marks only while enabled (on from the start): a caller's own bookkeeping ops stay out.
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  // The trace alive now, or nullptr.
  static OpTrace* current();

 private:
  std::array<std::atomic<bool>, kNumOps> seen_{};
  std::atomic<bool> enabled_{true};
};

namespace detail {
extern std::atomic<OpTrace*> g_op_trace;
inline void trace_op(OpId op) {
  if (OpTrace* t = g_op_trace.load(std::memory_order_acquire)) t->mark(op);
}
}  // namespace detail

}  // namespace anvil
