// Delete and teardown: a delete marks the sandbox (persisted) and answers; a teardown
// thread then stops its processes, drops its checkpoint, removes its files and its row,
// and collects the layers nothing uses any more.
#include "base/fault.h"
#include "base/log.h"
#include "core/processes.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

Status SandboxManager::Delete(const std::string& id, bool only_if_expired) {
  {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
    if (only_if_expired && !(e->is(State::kRunning) && e->rec.ttl_action == "delete" && e->rec.expires_ms > 0 &&
                             e->rec.expires_ms <= Now()))
      return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is no longer due to be deleted");
    metering_.Close(e->rec);
    std::string prev = e->rec.state;
    e->set_state(State::kDeleting);
    Status st = table_.Persist(*e);
    if (!st.ok()) {
      e->rec.state = prev;
      return st.error().Wrap("deleting " + id);
    }
    table_.MarkDeleting(e);
    ++deletes_;
  }
  FaultPoint("delete.marked");
  // Its background processes go with it (their readers close; the teardown ends them).
  if (processes_) processes_->Forget(id);
  teardowns_->Enqueue(id);
  return OkStatus();
}

void SandboxManager::DiscardLocked(const EntryPtr& e) {
  table_.MarkDeleting(e);
  (void)table_.Persist(*e);
  teardowns_->Enqueue(e->rec.id);
}

void SandboxManager::TeardownOne(const std::string& id) {
  // A create or start still in flight holds `busy`: let it settle, then stop what it
  // started, so no process outlives the delete. A restore from hibernation is cut short
  // instead: its processes (and CRIU, which runs in the sandbox's cgroup) are killed, so
  // the delete waits neither for a large checkpoint nor for a restored agent that does
  // not answer.
  runtime::Instance inst;
  runtime::Runtime* rt = runtimes_->layers();
  bool has_entry = false;
  storage::SandboxRecord rec;
  bool cancelled = false;
  {
    Lock lock(table_.mu);
    while (true) {
      EntryPtr e = table_.Deleting(id);
      if (e) rt = &Rt(e->rec);
      has_entry = has_entry || e;
      if (!e || (!e->busy && e->captures == 0)) {
        if (e) {
          inst = e->inst;
          rec = e->rec;
        }
        break;
      }
      if (e->restoring && !cancelled) {
        cancelled = true;
        table_.mu.Unlock();
        Status killed = rt->Stop(id, runtime::Instance());
        if (!killed.ok()) SBX_LOG(kWarn) << "cancelling the restore of " << id << ": " << killed.error().message;
        table_.mu.Lock();
        continue;
      }
      // Woken when a transition or a capture ends (the timeout only bounds a missed wake).
      table_.WaitSettled(lock, std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    }
  }
  // One that recovery queued without an entry (a warm-pool sandbox found at start): its
  // row says its wall.
  if (!has_entry)
    if (auto row = store_->GetSandbox(id); row.ok() && *row) rt = &Rt(**row);
  // Its rules and connections go once nothing of it runs, and before its folder (a
  // folder gone means all of it is); the checkpoint goes before the folder too.
  Status st = rt->Stop(id, inst);
  if (st.ok() && !rec.id.empty()) ReleaseNetwork(rec);
  if (st.ok()) st = rt->DropCheckpoint(CheckpointDir(id));
  if (st.ok()) st = rt->Destroy(id, DirOf(id));
  if (st.ok()) st = store_->DeleteSandbox(id);
  if (!st.ok()) SBX_LOG(kError) << "teardown of " << id << ": " << st.error().message;
  {
    Lock lock(table_.mu);
    table_.Forget(id);
  }
  table_.NotifySettled();
  CollectLayers();
}

void SandboxManager::DrainTeardowns() { teardowns_->Drain(); }

}  // namespace sbx::core
