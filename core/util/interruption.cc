#include "core/util/interruption.h"

#include <utility>

namespace anvil {

namespace {
thread_local const std::function<void()>* installed = nullptr;
}  // namespace

ScopedInterruptionCheck::ScopedInterruptionCheck(std::function<void()> check)
    : check_(std::move(check)), previous_(installed) {
  installed = &check_;
}

ScopedInterruptionCheck::~ScopedInterruptionCheck() { installed = previous_; }

void interruption_point() {
  if (installed != nullptr && *installed) (*installed)();
}

}  // namespace anvil
