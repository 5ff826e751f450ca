#include "core/ops/op_trace.h"

#include "core/util/error.h"

namespace anvil {

namespace detail {
std::atomic<OpTrace*> g_op_trace{nullptr};
}  // namespace detail

OpTrace::OpTrace() {
  OpTrace* expected = nullptr;
  ANVIL_CHECK(detail::g_op_trace.compare_exchange_strong(expected, this, std::memory_order_acq_rel),
              "an OpTrace is already running");
}

OpTrace::~OpTrace() { detail::g_op_trace.store(nullptr, std::memory_order_release); }

OpTrace* OpTrace::current() { return detail::g_op_trace.load(std::memory_order_acquire); }

}  // namespace anvil
