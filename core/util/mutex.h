// Anvil's lock (the engine's, the server's and the workers' shared state): a std::mutex that clang's
// thread-safety analysis knows, through Abseil's annotations (absl/base/thread_annotations.h),
// so a member says which lock guards it (ABSL_GUARDED_BY), a method what it needs
// (ABSL_EXCLUSIVE_LOCKS_REQUIRED), and clang's -Wthread-safety checks every access
// (cmake/AnvilWarnings.cmake: as errors in clang builds of every library).
//
// Not absl::Mutex: Debian's Abseil is built without ThreadSanitizer, whose runtime then cannot
// see absl::Mutex's ordering (its atomics are inside the uninstrumented library), and every
// guarded access it orders looked like a race; std::mutex's pthread calls TSan intercepts.
//
// Thread-safety: a Mutex is shared by the threads it orders; a MutexLock or UniqueMutexLock
// belongs to the thread that made it.
#pragma once

#include <absl/base/thread_annotations.h>

#include <mutex>

namespace anvil {

class ABSL_LOCKABLE Mutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Takes the mutex if it is free: true when taken (then held as after lock()).
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

  // For a std::condition_variable's wait (UniqueMutexLock::native): std::condition_variable
  // takes only std::unique_lock<std::mutex>, and is cheaper than condition_variable_any on
  // the hot paths (the batcher wakes one waiter per request).
  std::mutex& native() ABSL_LOCK_RETURNED(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  // Adopts `mu`, already held by this thread (a successful try_lock), and releases it at the
  // end of the scope.
  MutexLock(Mutex* mu, std::adopt_lock_t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) : mu_(mu) {}
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds `mu` for its scope like MutexLock, and lends a std::unique_lock over it to
// std::condition_variable::wait. The wait releases and retakes the mutex inside; the analysis
// sees it held throughout, which it is whenever the waiting code runs. Predicates read guarded
// state, so write the waits as loops in the annotated function rather than as lambdas (a
// lambda is analysed on its own, without the lock).
class ABSL_SCOPED_LOCKABLE UniqueMutexLock {
 public:
  explicit UniqueMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : lock_(mu->native()) {}
  ~UniqueMutexLock() ABSL_UNLOCK_FUNCTION() {}
  UniqueMutexLock(const UniqueMutexLock&) = delete;
  UniqueMutexLock& operator=(const UniqueMutexLock&) = delete;

  // Releases the mutex for a stretch of the scope and takes it again, as std::unique_lock's
  // (the destructor releases it only if held).
  void unlock() ABSL_UNLOCK_FUNCTION() { lock_.unlock(); }
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { lock_.lock(); }

  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace anvil
