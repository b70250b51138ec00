// Lifecycle: stop, start, pause (freeze or hibernate) and resume. Each checks the state
// under the table's lock, marks the sandbox busy, drops the lock for the runtime's work,
// and records the outcome (persisted) when it takes the lock back.
#include <chrono>

#include "base/fault.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/ids.h"
#include "core/processes.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

Status SandboxManager::StopLocked(const EntryPtr& e, const std::string& reason) {
  e->busy = true;
  runtime::Instance inst = e->inst;
  std::string id = e->rec.id;
  runtime::Runtime& rt = Rt(e->rec);
  storage::SandboxRecord counted = e->rec;  // its link goes with it: its bytes stay in its row
  table_.mu.Unlock();
  KeepLinkBytes(&counted);
  Status st = rt.Stop(id, inst);
  table_.mu.Lock();
  e->busy = false;
  table_.NotifySettled();
  if (!st.ok()) return st.error().Wrap("stopping " + id);
  if (e->is(State::kDeleting)) return OkStatus();
  // A hibernated sandbox's checkpoint goes: a start boots it afresh.
  if (e->rec.pause_mode == "hibernate") (void)rt.DropCheckpoint(CheckpointDir(id));
  e->rec.network_json = counted.network_json;
  MarkHibernatedLink(&e->rec, std::nullopt);  // its checkpoint went
  metering_.Close(e->rec, /*link_counted=*/true);
  e->set_state(State::kStopped);
  e->rec.pause_mode.clear();
  e->rec.paused_ms = 0;
  e->rec.runtime_state.clear();
  e->rec.error = reason;
  e->inst = runtime::Instance();
  // Background processes sbxd let go of around a hibernate end here, with the rest.
  if (processes_) processes_->EndDetached(id, "the sandbox was stopped");
  return table_.Persist(*e);
}

Result<SandboxView> SandboxManager::Stop(const std::string& id) {
  Lock lock(table_.mu);
  SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
  if (e->is(State::kStopped) && !e->busy && !e->captures) return View(*e);
  SBX_RETURN_IF_ERROR(table_.RequireState(*e, {State::kRunning, State::kPaused}));
  SBX_RETURN_IF_ERROR(StopLocked(e, ""));
  return View(*e);
}

Result<SandboxView> SandboxManager::Start(const std::string& id) {
  Lock lock(table_.mu);
  SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
  if (e->is(State::kRunning) && !e->busy && !e->captures) return View(*e);
  SBX_RETURN_IF_ERROR(table_.RequireState(*e, {State::kStopped, State::kError}));
  if (processes_) processes_->EndDetached(id, "the sandbox stopped");  // a start boots afresh
  if (!Rt(e->rec).HasFiles(DirOf(id)))
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " has lost its files and cannot start");
  SBX_RETURN_IF_ERROR(admission_.CheckQuota(table_, 1, e->rec.memory_mb, 0));
  SBX_RETURN_IF_ERROR(admission_.CheckDataDirSpace());
  e->busy = true;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Runtime& rt = Rt(e->rec);
  table_.mu.Unlock();
  auto inst = rt.Start(spec);
  table_.mu.Lock();
  e->busy = false;
  table_.NotifySettled();
  if (!inst.ok()) return inst.error();
  if (e->is(State::kDeleting)) return MakeError(Code::kNotFound, "sandbox " + id + " was deleted");
  e->inst = *inst;
  e->set_state(State::kRunning);
  e->rec.error.clear();
  e->rec.runtime_state = inst->saved_state;
  metering_.Open(e->rec);
  e->rec.expires_ms = e->rec.started_ms + e->rec.ttl_seconds * 1000;
  e->last_active_ms = e->rec.started_ms;
  SBX_RETURN_IF_ERROR(table_.Persist(*e));
  return View(*e);
}

Result<SandboxView> SandboxManager::Pause(const std::string& id, const std::string& mode) {
  if (mode != "freeze" && mode != "hibernate")
    return MakeError(Code::kInvalidArgument, "mode must be \"freeze\" or \"hibernate\"");
  // sbxd's connections to the processes that the agent keeps close before the checkpoint
  // (the processes run on into it) and open again after the resume, or at once if the
  // hibernate fails.
  bool detached = false;
  if (mode == "hibernate" && processes_) {
    {
      Lock lock(table_.mu);
      auto e = table_.Find(id);
      detached = e.ok() && (*e)->is(State::kRunning) && !(*e)->busy && Rt((*e)->rec).Caps().hibernate;
    }
    if (detached) processes_->Detach(id);
  }
  auto v = PauseOrHibernate(id, mode);
  if (detached && !v.ok()) processes_->Reattach(id, true);
  return v;
}

Result<SandboxView> SandboxManager::PauseOrHibernate(const std::string& id, const std::string& mode) {
  int64_t t0 = SteadyUs();
  Lock lock(table_.mu);
  SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
  const runtime::Capabilities caps = Rt(e->rec).Caps();
  if (mode == "hibernate" && !caps.hibernate) {
    const std::string kind = Rt(e->rec).Kind();
    if (kind != "container")
      return MakeError(Code::kInvalidArgument, "sandboxes of isolation " + kind + " cannot hibernate; use mode \"freeze\"");
    return MakeError(Code::kInvalidArgument,
                     "hibernate is not available on this sbxd's container wall: it needs CRIU that can checkpoint on "
                     "this kernel (start sbxd with --criu PATH; scripts/build-criu.sh builds it; sbxd's log says why "
                     "it has none); use mode \"freeze\", or a microVM sandbox");
  }
  if (mode == "freeze" && !caps.freeze)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + "'s isolation cannot freeze it");
  if (e->is(State::kPaused) && !e->busy) {
    if (e->rec.pause_mode == mode) return View(*e);
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is already paused with mode " +
                                                    e->rec.pause_mode + "; resume it first");
  }
  SBX_RETURN_IF_ERROR(table_.RequireState(*e, {State::kRunning}));
  SBX_RETURN_IF_ERROR(PauseLocked(e, mode));
  (mode == "hibernate" ? lat_.hibernate : lat_.pause).ObserveMs((SteadyUs() - t0) / 1000.0);
  return View(*e);
}

Status SandboxManager::PauseLocked(const EntryPtr& e, const std::string& mode) {
  const std::string id = e->rec.id;
  const bool hibernate = mode == "hibernate";
  runtime::Runtime& rt = Rt(e->rec);
  if (hibernate && e->active_execs > 0 && !rt.Caps().hibernate_with_open_connections)
    // A connection from sbxd into the sandbox (an exec, a background process, a file or
    // port request) cannot be part of a checkpoint.
    return MakeError(Code::kFailedPrecondition,
                     "sandbox " + id + " has " + std::to_string(e->active_execs) +
                         " exec, file or port connections open (or background processes of an agent from before \"procs\"); hibernate needs none "
                         "(wait for them, or pause with mode \"freeze\")");
  e->busy = true;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Instance inst = e->inst;
  storage::SandboxRecord counted = e->rec;  // a restore makes its link anew: its bytes so far stay in its row
  table_.mu.Unlock();
  Status st = OkStatus();
  if (hibernate) {
    KeepLinkBytes(&counted);
    // Its memory goes to disk: only if it fits with the reserve still free.
    std::string parent = opts_.data_dir + "/hibernated";
    (void)fs::MkdirAll(parent, 0711);
    st = admission_.CheckWrite(parent, rt.CheckpointBytes(id));
    if (st.ok()) st = rt.Hibernate(spec, inst, CheckpointDir(id));
  } else {
    st = rt.Freeze(id);
  }
  FaultPoint("pause.done");
  table_.mu.Lock();
  e->busy = false;
  table_.NotifySettled();
  if (!st.ok()) return st.error().Wrap("pausing " + id);
  if (e->is(State::kDeleting)) return MakeError(Code::kNotFound, "sandbox " + id + " was deleted");
  if (hibernate) e->rec.network_json = counted.network_json;  // its link went: its bytes are in the row now
  metering_.Close(e->rec, /*link_counted=*/hibernate);
  e->set_state(State::kPaused);
  e->rec.pause_mode = mode;
  e->rec.paused_ms = Now();
  if (hibernate) {
    // Its processes are gone (saved in CheckpointDir(id)); a resume restores them.
    e->inst = runtime::Instance();
    MarkHibernatedLink(&e->rec, spec.link);
    e->rec.runtime_state.clear();
  }
  ++pauses_;
  return table_.Persist(*e);
}

Result<SandboxView> SandboxManager::Resume(const std::string& id) {
  int64_t t0 = SteadyUs();
  bool restore = false;
  Result<SandboxView> v = [&]() -> Result<SandboxView> {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
    if (e->is(State::kRunning) && !e->busy) return View(*e);
    SBX_RETURN_IF_ERROR(table_.RequireState(*e, {State::kPaused}));
    restore = e->rec.pause_mode == "hibernate";
    SBX_RETURN_IF_ERROR(ResumeLocked(e));
    return View(*e);
  }();
  if (!v.ok()) return v;
  // Processes that the agent kept through a hibernate (or while sbxd was away) are
  // followed again before the resume answers.
  if (processes_) processes_->Reattach(id, restore);
  (restore ? lat_.restore : lat_.resume).ObserveMs((SteadyUs() - t0) / 1000.0);
  return v;
}

Status SandboxManager::ResumeLocked(const EntryPtr& e) {
  const std::string id = e->rec.id;
  const bool hibernated = e->rec.pause_mode == "hibernate";
  // A hibernated sandbox takes its memory back.
  if (hibernated) SBX_RETURN_IF_ERROR(admission_.CheckQuota(table_, 1, e->rec.memory_mb, 0));
  e->busy = true;
  e->restoring = hibernated;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Runtime& rt = Rt(e->rec);
  // The checkpoint holds the link the sandbox had when it was hibernated; rules changed
  // since then give it its link or take it away once it runs (or, on a wall whose
  // restore sets up the network anew, as it is restored).
  const auto had_link = HibernatedLink(e->rec), want_link = LinkOfRow(e->rec);
  const bool relinks = rt.Caps().restore_relinks;
  if (hibernated) spec.link = relinks ? want_link : had_link;
  table_.mu.Unlock();
  Status st = OkStatus();
  runtime::Instance restored;
  if (hibernated) {
    if (relinks && had_link && !want_link) st = rt.DetachLink(*had_link);
    auto inst = st.ok() ? rt.Restore(spec, CheckpointDir(id)) : Result<runtime::Instance>(st.error());
    if (inst.ok()) restored = *inst;
    else st = inst.error();
    if (st.ok() && !relinks && want_link && !spec.link) st = rt.AttachLink(id, restored, *want_link);
    if (st.ok() && !relinks && !want_link && spec.link) st = rt.DetachLink(*spec.link);
    if (!st.ok() && inst.ok()) (void)rt.Stop(id, restored);  // it stays hibernated
  } else {
    st = rt.Thaw(id);
  }
  table_.mu.Lock();
  e->busy = false;
  e->restoring = false;
  table_.NotifySettled();
  if (e->is(State::kDeleting)) {
    if (hibernated && st.ok()) (void)rt.Stop(id, restored);
    return MakeError(Code::kNotFound, "sandbox " + id + " was deleted");
  }
  if (!st.ok()) {
    Error err = st.error().Wrap("resuming " + id);
    // Its checkpoint and files are kept: a stop drops the one, a start boots the other.
    if (hibernated) err.message += " (it stays hibernated; a stop and a start boot it on its files)";
    return err;
  }
  if (hibernated) {
    e->inst = restored;
    e->rec.runtime_state = restored.saved_state;
    MarkHibernatedLink(&e->rec, std::nullopt);
  }
  int64_t now = Now();
  // The TTL clock stood still while paused; a sandbox paused by its TTL gets a new one.
  if (e->rec.expires_ms > e->rec.paused_ms) e->rec.expires_ms += now - e->rec.paused_ms;
  else e->rec.expires_ms = now + e->rec.ttl_seconds * 1000;
  e->set_state(State::kRunning);
  e->rec.pause_mode.clear();
  e->rec.paused_ms = 0;
  metering_.Open(e->rec);
  e->last_active_ms = now;
  e->cpu_sample_ms = 0;
  ++resumes_;
  SBX_RETURN_IF_ERROR(table_.Persist(*e));
  // The checkpoint is spent once the record points at the restored processes.
  if (hibernated) (void)rt.DropCheckpoint(CheckpointDir(id));
  return OkStatus();
}

}  // namespace sbx::core
