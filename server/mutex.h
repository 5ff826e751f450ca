// The service's lock: a std::mutex that clang's thread-safety analysis knows, through
// Abseil's annotations (absl/base/thread_annotations.h), so a member says which lock guards it
// (ABSL_GUARDED_BY), a method what it needs (ABSL_EXCLUSIVE_LOCKS_REQUIRED), and clang's
// -Wthread-safety checks every access (server/CMakeLists.txt: as errors in clang builds).
//
// Not absl::Mutex: Debian's Abseil is built without ThreadSanitizer, whose runtime then cannot
// see absl::Mutex's ordering (its atomics are inside the uninstrumented library), and every
// guarded access it orders looked like a race; std::mutex's pthread calls TSan intercepts.
#pragma once

#include <absl/base/thread_annotations.h>

#include <mutex>

namespace anvil::server {

class ABSL_LOCKABLE Mutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace anvil::server
