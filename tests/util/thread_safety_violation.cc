// Never built: the anvil_thread_safety_violation test (tests/CMakeLists.txt) hands this file to
// clang with the flags every library gets in clang builds (cmake/AnvilWarnings.cmake), and
// the compile must fail because Counter::racy_read reads a guarded member without its lock.
// Built with ANVIL_THREAD_SAFETY_CONTROL, the read takes the lock and the file must compile:
// the failure is the analysis refusing the read, not a missing header or a wrong flag.
#include "core/util/mutex.h"

namespace anvil {

class Counter {
 public:
  void add() {
    MutexLock lock(&mu_);
    ++n_;
  }
  int racy_read() const {
#ifdef ANVIL_THREAD_SAFETY_CONTROL
    MutexLock lock(&mu_);
#endif
    return n_;  // without the lock: "reading variable 'n_' requires holding mutex 'mu_'"
  }

 private:
  mutable Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

int count_once() {
  Counter c;
  c.add();
  return c.racy_read();
}

}  // namespace anvil
