// SandboxTable: the sandboxes sbxd holds, by id, behind one lock. It owns the map and
// the entries of those being torn down, the lookups (by id, by name), the state machine's
// one check (RequireState) and the event that a transition, capture or teardown ended.
// Every service of core (lifecycle, captures, exec, policy, the warm pool, teardown)
// works on entries through it, with its lock held (checked by clang, see base/sync.h).
#pragma once

#include <atomic>
#include <chrono>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/sync.h"
#include "runtime/runtime.h"
#include "storage/store.h"

namespace sbx::core {

// A sandbox's state (SPEC: creating -> running <-> paused, stopped, error; deleting).
// `pooled`: booted and warm in the pool, claimed by no one yet (never shown).
enum class State { kCreating, kRunning, kPaused, kStopped, kError, kDeleting, kPooled };
const char* StateName(State s);
State ParseState(const std::string& s);  // an unknown name reads as kError

struct Entry {
  storage::SandboxRecord rec;  // what is persisted (rec.state is StateName(state()))
  runtime::Instance inst;
  // Exec, file, port or process connections open, and the last activity (for the idle
  // policy): an exec ends without the table's lock, so these two are atomic.
  std::atomic<int> active_execs{0};
  std::atomic<int64_t> last_active_ms{0};
  bool busy = false;       // a blocking transition (start/stop/pause/resume) is in progress
  bool restoring = false;  // that transition is a restore from hibernation (a delete cancels it)
  int captures = 0;        // snapshots or forks copying its files
  // Idle policy: the last CPU sample.
  uint64_t cpu_ns = 0;
  int64_t cpu_sample_ms = 0;

  State state() const { return ParseState(rec.state); }
  bool is(State s) const { return rec.state == StateName(s); }
  void set_state(State s) { rec.state = StateName(s); }
};
using EntryPtr = std::shared_ptr<Entry>;

// The layer paths of a record's or snapshot's layers_json, topmost first.
std::vector<std::string> LayerPaths(const std::string& layers_json);

class SandboxTable {
 public:
  explicit SandboxTable(storage::Store* store) : store_(store) {}

  mutable Mutex mu;

  // kInvalidArgument for a malformed id, kNotFound for an unknown one.
  Result<EntryPtr> Find(const std::string& id) const SBX_REQUIRES(mu);
  // nullptr when absent (no error text).
  EntryPtr Get(const std::string& id) const SBX_REQUIRES(mu);
  // OK if `e` is in one of `allowed` and no transition or capture holds it; else
  // kFailedPrecondition naming what it is.
  Status RequireState(const Entry& e, std::initializer_list<State> allowed) const SBX_REQUIRES(mu);
  // The id that `ref` names: an id first, then a sandbox's name, then a unique prefix of an
  // id (with or without its "sb-"). kNotFound when nothing matches, kInvalidArgument
  // ("ambiguous ...") when a prefix matches several. Pooled sandboxes are nobody's.
  Result<std::string> Resolve(const std::string& ref) const SBX_REQUIRES(mu);
  // kAlreadyExists if a live sandbox other than `except` has this name.
  Status CheckNameFree(const std::string& name, const std::string& except = "") const SBX_REQUIRES(mu);

  void Add(const EntryPtr& e) SBX_REQUIRES(mu) { live_[e->rec.id] = e; }
  void Remove(const std::string& id) SBX_REQUIRES(mu) { live_.erase(id); }
  // Moves a sandbox (in the map or not: a pooled or failed one) among those torn down.
  void MarkDeleting(const EntryPtr& e) SBX_REQUIRES(mu);
  EntryPtr Deleting(const std::string& id) const SBX_REQUIRES(mu);
  void Forget(const std::string& id) SBX_REQUIRES(mu) { deleting_.erase(id); }

  const std::map<std::string, EntryPtr>& live() const SBX_REQUIRES(mu) { return live_; }
  const std::map<std::string, EntryPtr>& deleting() const SBX_REQUIRES(mu) { return deleting_; }

  // Writes the entry's record (its transitions are persisted before they are acted on).
  Status Persist(const Entry& e) const { return store_->UpdateSandbox(e.rec); }

  // A transition or capture ended, or a teardown finished.
  void NotifySettled() { settled_.notify_all(); }
  // Waits (lock held) for NotifySettled or the deadline; false on timeout.
  bool WaitSettled(MutexLock& lock, std::chrono::steady_clock::time_point deadline) {
    return settled_.wait_until(lock, deadline) == std::cv_status::no_timeout;
  }

 private:
  storage::Store* store_;
  std::map<std::string, EntryPtr> live_ SBX_GUARDED_BY(mu);      // not deleting
  std::map<std::string, EntryPtr> deleting_ SBX_GUARDED_BY(mu);  // queued for teardown
  CondVar settled_;
};

}  // namespace sbx::core
