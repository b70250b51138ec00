// SandboxManager::Recover: on start, reconciles the database (what should exist) with the
// kernel (what does). Runs once, before the listener opens.
#include <future>
#include <nlohmann/json.hpp>
#include <set>

#include "base/fs.h"
#include "base/log.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

using json = nlohmann::json;

std::map<std::string, Result<runtime::Instance>> SandboxManager::AdoptAll(
    const std::vector<storage::SandboxRecord>& rows) {
  // Each adoption asks the sandbox's agent for a word (within the dial deadline). They
  // run side by side, so that silent agents hold up the start by one deadline at most,
  // whatever their number; the rest are marked as errors by the caller.
  constexpr size_t kParallel = 32;
  std::map<std::string, Result<runtime::Instance>> out;
  std::vector<const storage::SandboxRecord*> todo;
  for (const auto& r : rows) {
    bool hibernated = ParseState(r.state) == State::kPaused && r.pause_mode == "hibernate";
    if ((ParseState(r.state) == State::kRunning || ParseState(r.state) == State::kPaused) && !hibernated &&
        r.billing != "call" && runtimes_->Find(r.isolation))
      todo.push_back(&r);
  }
  for (size_t at = 0; at < todo.size(); at += kParallel) {
    std::vector<std::pair<std::string, std::future<Result<runtime::Instance>>>> batch;
    for (size_t i = at; i < std::min(todo.size(), at + kParallel); ++i) {
      const storage::SandboxRecord* r = todo[i];
      batch.emplace_back(r->id, std::async(std::launch::async, [this, r] {
                           return Rt(*r).Adopt(SpecOf(*r), r->runtime_state, ParseState(r->state) == State::kPaused);
                         }));
    }
    for (auto& [id, f] : batch) out.emplace(id, f.get());
  }
  return out;
}

Status SandboxManager::Recover() {
  SBX_ASSIGN_OR_RETURN(auto rows, store_->ListSandboxes());
  auto adopted = AdoptAll(rows);
  std::set<std::string> live_ids, known_ids, torn_down;
  std::vector<std::string> layers_in_use;
  for (auto& r : rows) {
    known_ids.insert(r.id);
    for (auto& l : LayerPaths(r.layers_json)) layers_in_use.push_back(std::move(l));
    // A serverless call's sandbox outlives its call only by a crash: nobody waits for
    // its answer any more, so it goes (its disk keeps whatever the command wrote).
    if (r.billing == "call" && r.state != "deleting") {
      metering_.Close(r);
      r.state = StateName(State::kDeleting);
      SBX_RETURN_IF_ERROR(store_->UpdateSandbox(r));
      torn_down.insert(r.id);
      ForgetRowConnections(r);
      teardowns_->Enqueue(r.id);
      continue;
    }
    if (ParseState(r.state) == State::kDeleting || ParseState(r.state) == State::kPooled) {
      // A warm-pool sandbox is cheaper to make again than to re-adopt.
      if (ParseState(r.state) == State::kPooled) {
        r.state = StateName(State::kDeleting);
        SBX_RETURN_IF_ERROR(store_->UpdateSandbox(r));
      }
      torn_down.insert(r.id);
      ForgetRowConnections(r);
      teardowns_->Enqueue(r.id);
      continue;
    }
    auto e = std::make_shared<Entry>();
    e->last_active_ms = Now();
    if (!runtimes_->Find(r.isolation)) {
      // Its wall is missing from this sbxd (started without it this time): the row stays
      // as it was, its kernel objects too, and every call on it is refused naming the
      // wall (runtime/missing_wall.h); an sbxd with that wall adopts it again.
      SBX_LOG(kWarn) << "sandbox " << r.id << " is of isolation " << r.isolation
                     << ", which this sbxd does not have: it is kept as it is";
      live_ids.insert(r.id);
      e->rec = r;
      Lock lock(table_.mu);
      table_.Add(e);
      continue;
    }
    const bool frozen = ParseState(r.state) == State::kPaused;
    const bool checkpointed = Rt(r).HasCheckpoint(CheckpointDir(r.id));
    if (frozen && r.pause_mode == "hibernate") {
      // Its processes are a checkpoint on disk: nothing to adopt (its cgroup stays).
      if (checkpointed) {
        // Processes in its cgroup would be a restore that sbxd died before recording:
        // the checkpoint is what counts, they go (a resume restores it again).
        (void)Rt(r).Stop(r.id, runtime::Instance());
        live_ids.insert(r.id);
        SBX_LOG(kInfo) << "hibernated sandbox " << r.id << " stays hibernated";
      } else {
        metering_.Close(r);
        r.state = StateName(State::kError);
        r.error = "its checkpoint is missing (" + CheckpointDir(r.id) + ")";
        r.pause_mode.clear();
        r.paused_ms = 0;
        SBX_LOG(kWarn) << "sandbox " << r.id << ": " << r.error;
      }
    } else if (ParseState(r.state) == State::kRunning || frozen) {
      // A frozen sandbox stays frozen: it is adopted without a word from its agent.
      auto inst = std::move(adopted.at(r.id));
      if (inst.ok()) {
        e->inst = *inst;
        live_ids.insert(r.id);
        SBX_LOG(kInfo) << "re-adopted " << r.state << " sandbox " << r.id;
      } else if (ParseState(r.state) == State::kRunning && checkpointed) {
        // sbxd died between the checkpoint and recording it: the sandbox is hibernated.
        metering_.Close(r);
        r.state = StateName(State::kPaused);
        r.pause_mode = "hibernate";
        r.paused_ms = Now();
        r.runtime_state.clear();
        live_ids.insert(r.id);
        SBX_LOG(kInfo) << "sandbox " << r.id << " was checkpointed as sbxd stopped: it is hibernated";
      } else {
        metering_.Close(r);
        r.state = StateName(State::kError);
        r.error = "its processes ended while sbxd was down (" + inst.error().message + ")";
        r.runtime_state.clear();
        r.pause_mode.clear();
        r.paused_ms = 0;
        SBX_LOG(kWarn) << "sandbox " << r.id << ": " << r.error;
      }
    } else if (ParseState(r.state) == State::kCreating) {
      r.state = StateName(State::kError);
      r.error = "sbxd stopped while the sandbox was being created";
      r.runtime_state.clear();
    }
    SBX_RETURN_IF_ERROR(store_->UpdateSandbox(r));
    e->rec = r;
    Lock lock(table_.mu);
    table_.Add(e);
  }
  // Kernel objects that belong to no live sandbox: kill and remove them.
  for (const auto& [kind, rt] : runtimes_->all()) {
    for (const auto& id : rt->ListKernelObjects()) {
      // A sandbox queued for teardown above is not an orphan: its teardown, already
      // running on another thread, kills and removes the same cgroup.
      if (live_ids.count(id) || torn_down.count(id)) continue;
      SBX_LOG(kInfo) << "cleaning orphaned kernel objects of " << id;
      if (known_ids.count(id)) {
        runtime::Instance none;
        (void)rt->Stop(id, none);
      } else {
        (void)rt->Destroy(id, DirOf(id));
      }
    }
  }
  // Directories that no row refers to.
  auto dirs = fs::ListDir(opts_.data_dir + "/sandboxes");
  if (dirs.ok())
    for (const auto& d : *dirs)
      if (!known_ids.count(d)) {
        SBX_LOG(kInfo) << "removing orphaned sandbox directory " << d;
        // Whichever wall made it: each undoes what it holds on the host (the gVisor wall
        // its runsc record and root mount), the layers' wall last removes the folder.
        for (const auto& [kind, rt] : runtimes_->all())
          if (rt != runtimes_->layers()) (void)rt->Destroy(d, DirOf(d));
        (void)runtimes_->layers()->Destroy(d, DirOf(d));
      }
  // Checkpoints of sandboxes that are not hibernated (any more).
  auto saved = fs::ListDir(opts_.data_dir + "/hibernated");
  if (saved.ok())
    for (const auto& d : *saved) {
      Lock lock(table_.mu);
      EntryPtr e = table_.Get(d);
      if (!e || e->rec.pause_mode != "hibernate") {
        SBX_LOG(kInfo) << "removing the spent checkpoint of " << d;
        (void)runtimes_->layers()->DropCheckpoint(CheckpointDir(d));
      }
    }
  auto snaps = store_->ListSnapshots();
  if (snaps.ok())
    for (const auto& sn : *snaps)
      for (auto& l : LayerPaths(sn.layers_json)) layers_in_use.push_back(std::move(l));
  images_->CollectGarbage(layers_in_use);
  CollectLayers();
  return OkStatus();
}

}  // namespace sbx::core
