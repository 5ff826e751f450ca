// Cooperative interruption of the engine's long loops (reading a large table, decoding an
// image folder): a caller that may give the work up installs a check on its thread for a
// scope, and the loops call interruption_point() every so often; the check throws to stop the
// work there. The service installs one around a dry run's plan, whose client may leave while
// a large file loads (server/heavy_work.h: the call is answered CANCELLED and the rest of the
// load is not done for nobody). Without a check installed an interruption point is one
// thread-local load, so loops may call it freely.
//
// Thread-safety: a check belongs to the thread that installed it; work that thread hands to
// other threads (the intra-op pool) does not see it. Scopes nest: the innermost check runs,
// and the one before it is restored when that scope ends.
#pragma once

#include <functional>

namespace anvil {

class ScopedInterruptionCheck {
 public:
  // `check` returns to let the work go on, or throws to stop it.
  explicit ScopedInterruptionCheck(std::function<void()> check);
  ~ScopedInterruptionCheck();
  ScopedInterruptionCheck(const ScopedInterruptionCheck&) = delete;
  ScopedInterruptionCheck& operator=(const ScopedInterruptionCheck&) = delete;

 private:
  std::function<void()> check_;
  const std::function<void()>* previous_;
};

// Runs the calling thread's installed check, if any (it may throw).
void interruption_point();

}  // namespace anvil
