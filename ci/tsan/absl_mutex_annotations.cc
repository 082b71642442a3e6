// Tells ThreadSanitizer about absl::Mutex and absl::CondVar, for a TSan build against a
// system abseil that was not built with -fsanitize=thread (Debian's).
//
// An uninstrumented absl::Mutex synchronizes through atomics and futexes TSan never sees,
// so every field guarded by one would be reported as a race. Preloaded (LD_PRELOAD, see
// ci/tsan.sh), this library interposes the out-of-line Mutex and CondVar entry points,
// forwards each to the real one (dlsym RTLD_NEXT) and annotates it: a lock is an acquire
// of the mutex, an unlock a release, and a wait (CondVar::Wait, Mutex::Await) releases
// before and acquires after, as the real wait does. Reader locks are treated like writer
// locks (slightly more ordering than the real thing; it can hide no writer-writer race).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define FUSETUNE_STR2(x) #x
#define FUSETUNE_STR(x) FUSETUNE_STR2(x)

// The real symbol: "_ZN4absl" + <inline namespace> + `rest` (Itanium mangling).
void* Real(const char* rest) {
  const char* ns = FUSETUNE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(std::strlen(ns)) + ns + rest;
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_mutex_annotations: %s not found\n", name.c_str());
    std::abort();
  }
  return f;
}

template <typename F>
F RealAs(const char* rest) {
  return reinterpret_cast<F>(Real(rest));
}

using absl::CondVar;
using absl::Condition;
using absl::Duration;
using absl::Mutex;
using absl::Time;

}  // namespace

#define FUSETUNE_REAL(type, rest)                  \
  static const auto real = RealAs<type>(rest)

void Mutex::Lock() {
  FUSETUNE_REAL(void (*)(Mutex*), "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::Unlock() {
  FUSETUNE_REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}
bool Mutex::TryLock() {
  FUSETUNE_REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::ReaderLock() {
  FUSETUNE_REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderUnlock() {
  FUSETUNE_REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}
bool Mutex::ReaderTryLock() {
  FUSETUNE_REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::LockWhen(const Condition& cond) {
  FUSETUNE_REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  FUSETUNE_REAL(void (*)(Mutex*, const Condition&), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  FUSETUNE_REAL(bool (*)(Mutex*, const Condition&, Duration),
                "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);  // held either way
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  FUSETUNE_REAL(bool (*)(Mutex*, const Condition&, Time),
                "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  FUSETUNE_REAL(bool (*)(Mutex*, const Condition&, Duration),
                "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  FUSETUNE_REAL(bool (*)(Mutex*, const Condition&, Time),
                "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}
void Mutex::Await(const Condition& cond) {
  FUSETUNE_REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  FUSETUNE_REAL(bool (*)(Mutex*, const Condition&, Duration),
                "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  FUSETUNE_REAL(bool (*)(Mutex*, const Condition&, Time),
                "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}
void CondVar::Wait(Mutex* mu) {
  FUSETUNE_REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  FUSETUNE_REAL(bool (*)(CondVar*, Mutex*, Duration), "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  FUSETUNE_REAL(bool (*)(CondVar*, Mutex*, Time), "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}
