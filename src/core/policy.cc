// Policy, applied about once a second (Tick): sandboxes whose init died are marked error,
// those past their TTL are stopped, paused or deleted, and idle ones are paused.
#include "base/log.h"
#include "base/scope_exit.h"
#include "core/processes.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

void SandboxManager::Tick() {
  // One at a time: a tick that outlasts a second (a slow stop) is not joined by the next.
  if (ticking_.exchange(true)) return;
  ScopeExit done([this] { ticking_ = false; });
  std::vector<std::string> expired, idle;
  struct Died {
    std::string id;
    runtime::Instance inst;
    runtime::Runtime* rt;
  };
  std::vector<Died> died;
  // Sandboxes with an idle policy: their CPU use is read after the lock goes.
  struct Sampled {
    EntryPtr e;
    runtime::Instance inst;
    runtime::Runtime* rt;
    uint64_t cpu = 0;
  };
  std::vector<Sampled> sampled;
  const int64_t now = Now();
  {
    Lock lock(table_.mu);
    for (const auto& [id, e] : table_.live()) {
      if (!e->is(State::kRunning) || e->busy) continue;
      if (!runtimes_->Find(e->rec.isolation)) continue;  // kept as it is (recovery.cc)
      if (!Rt(e->rec).Alive(e->inst)) {
        // Its init ended (killed from outside, or the whole sandbox was OOM-killed).
        metering_.Close(e->rec);
        e->set_state(State::kError);
        e->rec.error = "the sandbox's init exited unexpectedly; start it to boot it again";
        e->rec.runtime_state.clear();
        died.push_back({id, e->inst, &Rt(e->rec)});
        e->inst = runtime::Instance();
        Status st = table_.Persist(*e);
        if (!st.ok()) SBX_LOG(kError) << st.error().message;
        SBX_LOG(kWarn) << "sandbox " << id << ": " << e->rec.error;
        continue;
      }
      if (e->rec.expires_ms > 0 && e->rec.expires_ms <= now) {
        expired.push_back(id);
        continue;
      }
      if (e->rec.idle_timeout_seconds > 0) sampled.push_back({e, e->inst, &Rt(e->rec)});
    }
  }
  for (auto& s : sampled) s.cpu = s.rt->CpuUsageNs(s.e->rec.id, s.inst);  // cgroup reads
  {
    Lock lock(table_.mu);
    for (const auto& [e, inst, rt, cpu] : sampled) {
      if (!e->is(State::kRunning) || e->busy) continue;
      // Idle policy: an exec or a capture in flight is activity, and so is CPU use above
      // the threshold since the last sample (a build started in the background).
      if (e->active_execs > 0 || e->captures > 0) e->last_active_ms = now;
      if (e->cpu_sample_ms > 0 && now > e->cpu_sample_ms && cpu >= e->cpu_ns) {
        double share = static_cast<double>(cpu - e->cpu_ns) / (static_cast<double>(now - e->cpu_sample_ms) * 1e6);
        if (share > opts_.idle_cpu_threshold) e->last_active_ms = now;
      }
      if (now != e->cpu_sample_ms) {
        e->cpu_ns = cpu;
        e->cpu_sample_ms = now;
      }
      if (now - e->last_active_ms >= e->rec.idle_timeout_seconds * 1000) idle.push_back(e->rec.id);
    }
  }
  // What the dead sandboxes left (other processes, cgroups) goes; their files stay.
  for (const auto& [id, inst, rt] : died) {
    Status st = rt->Stop(id, inst);
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
  std::vector<std::string> to_delete;
  for (const auto& id : expired) {
    Lock lock(table_.mu);
    EntryPtr e = table_.Get(id);
    if (!e || !table_.RequireState(*e, {State::kRunning}).ok()) continue;
    if (e->rec.ttl_action == "delete") {
      to_delete.push_back(id);  // Delete takes the table's lock itself
      continue;
    }
    if (e->rec.ttl_action == "pause") {
      SBX_LOG(kInfo) << "sandbox " << id << " reached its TTL; pausing it";
      Status st = PauseLocked(e, "freeze");
      if (!st.ok()) SBX_LOG(kError) << st.error().message;
      continue;
    }
    SBX_LOG(kInfo) << "sandbox " << id << " reached its TTL; stopping it";
    Status st = StopLocked(e, "");
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
  for (const auto& id : to_delete) {
    // Checked again as it is marked: a TTL moved on since (a timeout, a connect) keeps it.
    Status st = Delete(id, /*only_if_expired=*/true);
    if (st.ok()) {
      SBX_LOG(kInfo) << "sandbox " << id << " reached its TTL; deleting it";
    } else if (st.error().code != Code::kNotFound && st.error().code != Code::kFailedPrecondition) {
      SBX_LOG(kError) << st.error().message;
    }
  }
  for (const auto& id : idle) {
    Lock lock(table_.mu);
    EntryPtr e = table_.Get(id);
    if (!e || !table_.RequireState(*e, {State::kRunning}).ok() || e->active_execs) continue;
    SBX_LOG(kInfo) << "sandbox " << id << " was idle for " << e->rec.idle_timeout_seconds << " s; pausing it";
    Status st = PauseLocked(e, "freeze");
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
}

}  // namespace sbx::core
