// The warm pool: for each image or snapshot created from lately (and each disk of
// repeated serverless calls), pool_size booted, warmed sandboxes wait; a create claims
// one and only what is per-sandbox changes. A background thread refills, yielding to
// sandboxes in use.
#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "base/log.h"
#include "core/processes.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

using nlohmann::json;
using storage::SandboxRecord;

EntryPtr SandboxManager::TakeFromPool(const CreateRequest& req, const std::string& image,
                                      const std::vector<std::string>& layers) {
  // The key: the isolation kind, the root's layers, and the disks bound at boot
  // (repeated serverless calls on one disk claim sandboxes that already have it).
  json disk_key = json::array();
  for (const auto& [d, path] : req.disks) disk_key.push_back({d, path});
  std::string key = req.isolation + " " + (req.disks.empty() ? json(layers).dump() : json{layers, disk_key}.dump());
  Lock lock(table_.mu);
  auto& k = wanted_[key];
  k.isolation = req.isolation;
  k.image = image;
  k.from = req.from;
  k.layers = layers;
  k.disks = req.disks;
  k.last_used_ms = Now();
  EntryPtr pooled = TakePooled(key);
  pool_cv_.notify_all();
  return pooled;
}

EntryPtr SandboxManager::TakePooled(const std::string& key) {
  auto it = pool_.find(key);
  while (it != pool_.end() && !it->second.empty()) {
    auto e = it->second.front();
    it->second.pop_front();
    if (Rt(e->rec).Alive(e->inst)) return e;
    // Died while waiting (killed from outside): it goes.
    DiscardLocked(e);
  }
  return nullptr;
}

bool SandboxManager::PoolFits(const CreateRequest& req, const SandboxType& type) const {
  runtime::Runtime* rt = runtimes_->Find(req.isolation);
  if (!rt) return true;
  auto small = types_.Find("small");  // the pool's type
  // Pooled sandboxes have the daemon's default network: a link cannot come or go later,
  // nor change its pace.
  if (!rt->Caps().live_links && network_) {
    auto wants_link = [&](const json& n) {
      auto rules = net::Rules::FromJson(n, opts_.default_network);
      return rules.ok() && rules->mode == "outbound";
    };
    if (wants_link(req.network) != wants_link(json::object())) return false;
    if (!small.ok() || type.network_mbps != small->network_mbps) return false;
  }
  if (!rt->Caps().fixed_shape) return true;
  return small.ok() && req.cpus.value_or(type.cpus) == small->cpus &&
         req.memory_mb.value_or(type.memory_mb) == small->memory_mb;
}

Result<SandboxView> SandboxManager::Claim(EntryPtr e, const CreateRequest& req, const SandboxType& type) {
  // Only what is per-sandbox changes: the pooled sandbox has run nothing, so it is
  // exactly what a cold create would have made.
  SandboxRecord claimed = MakeRecord(req, type, e->rec.image, LayerPaths(e->rec.layers_json));
  claimed.id = e->rec.id;
  claimed.layers_json = e->rec.layers_json;
  claimed.disks_json = e->rec.disks_json;
  claimed.runtime_state = e->rec.runtime_state;
  runtime::Limits limits{static_cast<int>(claimed.cpus), static_cast<uint64_t>(claimed.memory_mb) << 20,
                         static_cast<int>(claimed.pids)};
  auto give_back = [&] {
    Lock lock(table_.mu);
    DiscardLocked(e);
  };
  if (claimed.cpus != e->rec.cpus || claimed.memory_mb != e->rec.memory_mb || claimed.pids != e->rec.pids) {
    Status st = Rt(e->rec).UpdateLimits(e->rec.id, limits);
    if (!st.ok()) {
      give_back();
      return st.error();
    }
  }
  if (claimed.disk_mb != e->rec.disk_mb) {
    Status st = Rt(e->rec).SetDiskLimit(DirOf(e->rec.id), static_cast<uint64_t>(claimed.disk_mb) << 20);
    if (!st.ok()) {
      give_back();
      return st.error();
    }
  }
  // Its rules: the pooled sandbox's (the daemon's default) unless the request differs.
  if (Status st = ClaimNetwork(e->rec, e->inst, &claimed); !st.ok()) {
    ReleaseNetwork(claimed);
    give_back();
    return st.error();
  }
  Lock lock(table_.mu);
  if (Status free = table_.CheckNameFree(claimed.name); !free.ok()) {
    ReleaseNetwork(claimed);
    DiscardLocked(e);
    return free.error();
  }
  if (Status q = admission_.CheckQuota(table_, 1, claimed.memory_mb, claimed.disk_mb); !q.ok()) {
    ReleaseNetwork(claimed);
    DiscardLocked(e);
    return q.error();
  }
  claimed.state = StateName(State::kRunning);
  metering_.Open(claimed);
  claimed.expires_ms = claimed.started_ms + claimed.ttl_seconds * 1000;
  SandboxRecord before = e->rec;
  e->rec = claimed;
  Status st = table_.Persist(*e);
  if (!st.ok()) {
    (void)store_->ClosePeriod(claimed.id, claimed.started_ms);  // nothing was billed
    e->rec = before;
    ReleaseNetwork(claimed);
    DiscardLocked(e);
    if (st.error().code == Code::kAlreadyExists)
      return MakeError(Code::kAlreadyExists, "a sandbox named \"" + claimed.name + "\" exists");
    return st.error();
  }
  e->last_active_ms = e->rec.started_ms;
  table_.Add(e);
  ++creates_;
  ++pool_claims_;
  SandboxView view = View(*e);
  FollowLoadedProcesses(e->inst, std::string(e->rec.id));
  return view;
}

void SandboxManager::FollowLoadedProcesses(const runtime::Instance& inst, const std::string& id) {
  if (!inst.loaded_memory) return;
  table_.mu.Unlock();
  // Its processes came with the memory of another sandbox: /run/sbx.env names this one.
  RenewSelfEnv(id);
  if (processes_) processes_->Reattach(id, true);
  table_.mu.Lock();
}

bool SandboxManager::FillOne(const std::string& key, const PoolKey& k) {
  auto type = types_.Find("small");
  if (!type.ok()) return false;
  for (const auto& l : k.layers)
    if (!fs::IsDir(l)) {
      // Its image or template is gone: nothing to keep warm.
      Lock lock(table_.mu);
      DropPool(key);
      return false;
    }
  CreateRequest req;
  req.isolation = k.isolation;
  req.from = k.from;
  req.disks = k.disks;
  if (!k.disks.empty()) req.metadata = {{"serverless_disk", k.disks.front().first}};
  auto e = std::make_shared<Entry>();
  e->rec = MakeRecord(req, *type, k.image, k.layers);
  e->set_state(State::kPooled);
  // The daemon's default network, link and all: a claim that asks for it changes nothing.
  if (Status net = PrepareNetwork(&e->rec); !net.ok()) {
    SBX_LOG(kWarn) << "filling the pool: " << net.error().message;
    return false;
  }
  // The row first, so a crash leaves something Recover() removes.
  if (!store_->InsertSandbox(e->rec).ok()) {
    ReleaseNetwork(e->rec);
    return false;
  }
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Runtime& rt = Rt(e->rec);
  Status st = rt.Prepare(spec);
  Result<runtime::Instance> inst = st.ok() ? rt.Start(spec) : Result<runtime::Instance>(st.error());
  if (inst.ok()) {
    // Walk the root once, so the first command of its user finds its files cached.
    Status warm = agent::WarmBlocking(*inst->agent, 60000);
    if (!warm.ok()) SBX_LOG(kWarn) << "warming pooled sandbox " << e->rec.id << ": " << warm.error().message;
  }
  Lock lock(table_.mu);
  if (!inst.ok()) {
    SBX_LOG(kWarn) << "filling the pool: " << inst.error().message;
    DiscardLocked(e);
    return false;
  }
  e->inst = *inst;
  e->rec.runtime_state = inst->saved_state;
  (void)table_.Persist(*e);
  if (!wanted_.count(key)) {
    // Its template went away meanwhile.
    DiscardLocked(e);
    return true;
  }
  pool_[key].push_back(e);
  return true;
}

void SandboxManager::DropPool(const std::string& key) {
  wanted_.erase(key);
  auto it = pool_.find(key);
  if (it == pool_.end()) return;
  for (auto& e : it->second) DiscardLocked(e);
  pool_.erase(it);
}

void SandboxManager::DropPoolIf(const std::function<bool(const PoolKey&)>& match) {
  Lock lock(table_.mu);
  std::vector<std::string> keys;
  for (const auto& [key, k] : wanted_)
    if (match(k)) keys.push_back(key);
  for (const auto& key : keys) DropPool(key);
}

void SandboxManager::PoolLoop() {
  // A refill that still has a sandbox in stock yields to commands running in sandboxes,
  // and to sandboxes used in the last 200 ms (for up to 2 s at a time): its start and the
  // walk that warms it would take CPU from them. It then runs in the pause after, as
  // while a model thinks between tool calls.
  constexpr int64_t kYieldMs = 2000;
  int64_t yielding_since = 0;
  while (true) {
    std::string key;
    PoolKey k;
    {
      Lock lock(table_.mu);
      if (pool_stopping_) return;
      // Keys unused for a while give their sandboxes back.
      int64_t now = Now();
      std::vector<std::string> stale;
      for (const auto& [kk, w] : wanted_)
        if (now - w.last_used_ms > opts_.pool_keep_ms) stale.push_back(kk);
      for (const auto& kk : stale) DropPool(kk);
      for (const auto& [kk, w] : wanted_)
        if (pool_[kk].size() < static_cast<size_t>(opts_.pool_size) && w.retry_after_ms <= now) {
          key = kk;
          k = w;
          break;
        }
      if (key.empty()) {
        pool_cv_.wait_for(lock, std::chrono::milliseconds(500));
        continue;
      }
      // Busy: a command runs, or a sandbox was just made or used (its first command is
      // likely on its way).
      bool busy = false;
      for (const auto& [_, e] : table_.live())
        if (!e->is(State::kPooled) && (e->active_execs > 0 || now - e->last_active_ms < 200)) busy = true;
      if (busy && !pool_[key].empty()) {
        if (yielding_since == 0) yielding_since = now;
        if (now - yielding_since < kYieldMs) {
          pool_cv_.wait_for(lock, std::chrono::milliseconds(20));
          continue;
        }
      }
      yielding_since = 0;
    }
    bool ok = FillOne(key, k);
    Lock lock(table_.mu);
    auto it = wanted_.find(key);
    if (it == wanted_.end()) continue;
    if (ok) {
      it->second.failures = 0;
      it->second.retry_after_ms = 0;
    } else {
      // Back off: 100 ms, doubling up to a minute.
      int f = std::min(++it->second.failures, 10);
      it->second.retry_after_ms = Now() + std::min<int64_t>(60000, 100LL << f);
    }
  }
}

}  // namespace sbx::core
