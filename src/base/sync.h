// A mutex the compiler checks: with clang's -Wthread-safety, a field marked
// SBX_GUARDED_BY(mu) may only be touched with mu held, and a function marked
// SBX_REQUIRES(mu) only called with it held (scripts/lint.sh builds core that way).
// Other compilers see plain std::mutex.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define SBX_TSA(x) __attribute__((x))
#else
#define SBX_TSA(x)
#endif

#define SBX_CAPABILITY(x) SBX_TSA(capability(x))
#define SBX_SCOPED_CAPABILITY SBX_TSA(scoped_lockable)
#define SBX_GUARDED_BY(x) SBX_TSA(guarded_by(x))
#define SBX_PT_GUARDED_BY(x) SBX_TSA(pt_guarded_by(x))
#define SBX_REQUIRES(...) SBX_TSA(requires_capability(__VA_ARGS__))
#define SBX_EXCLUDES(...) SBX_TSA(locks_excluded(__VA_ARGS__))
#define SBX_ACQUIRE(...) SBX_TSA(acquire_capability(__VA_ARGS__))
#define SBX_RELEASE(...) SBX_TSA(release_capability(__VA_ARGS__))
#define SBX_NO_THREAD_SAFETY_ANALYSIS SBX_TSA(no_thread_safety_analysis)

namespace sbx {

class SBX_CAPABILITY("mutex") Mutex {
 public:
  void Lock() SBX_ACQUIRE() { mu_.lock(); }
  void Unlock() SBX_RELEASE() { mu_.unlock(); }
  // For condition variables (std::condition_variable_any takes any lockable).
  void lock() SBX_ACQUIRE() { mu_.lock(); }
  void unlock() SBX_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. A condition variable may wait on it (it unlocks and
// relocks through lock()/unlock()), and code that must drop the lock around slow work
// (a runtime call) calls Unlock() and Lock() on the Mutex itself.
class SBX_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SBX_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() SBX_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void lock() SBX_ACQUIRE() { mu_.Lock(); }
  void unlock() SBX_RELEASE() { mu_.Unlock(); }

 private:
  Mutex& mu_;
};

using CondVar = std::condition_variable_any;

}  // namespace sbx
