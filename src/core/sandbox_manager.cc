// SandboxManager: construction, views and lookups. The operations live in the files
// that sandbox_manager.h lists.
#include "core/sandbox_manager.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/ids.h"
#include "base/log.h"
#include "net/network.h"

namespace sbx::core {

using nlohmann::json;
using storage::SandboxRecord;

namespace {
std::function<int64_t()> ClockOf(const ManagerOptions& o) {
  return o.now_ms ? o.now_ms : [] { return NowUnixMs(); };
}
}  // namespace

SandboxManager::SandboxManager(ManagerOptions opts, storage::Store* store, layers::ImageStore* images,
                               const runtime::Registry* runtimes, TypeTable types)
    : opts_([&] {
        opts.now_ms = ClockOf(opts);
        return std::move(opts);
      }()),
      store_(store),
      images_(images),
      runtimes_(runtimes),
      types_(std::move(types)),
      table_(store),
      admission_(opts_.data_dir, opts_.quotas, opts_.min_free_mb,
                 StoreBudget(opts_.store_dir, opts_.store_mb, opts_.min_free_mb, opts_.store_overcommit)),
      metering_(store, &types_, opts_.now_ms, opts_.serverless_call_usd),
      secrets_(store, opts_.secret_key, opts_.now_ms) {
  teardowns_ = std::make_unique<WorkQueue>(opts_.teardown_threads, [this](const std::string& id) { TeardownOne(id); });
  // A billing period keeps the bytes its sandbox moved: read when it opens and closes
  // (the caller holds the table's lock), and for a period still open when usage is asked.
  metering_.SetNetworkBytes(
      [this](const SandboxRecord& r, bool linked) {
        return RowNetworkBytes(r, linked && (r.state == "running" || r.state == "paused"));
      },
      [this](const std::string& id) -> std::optional<Metering::Bytes> {
        Lock lock(table_.mu);
        auto e = table_.Find(id);
        if (!e.ok()) return std::nullopt;
        return NetworkBytes(**e);
      });
  if (opts_.pool_size > 0)
    pool_thread_ = std::thread([this] {
      BecomeIdle();
      PoolLoop();
    });
}

SandboxManager::~SandboxManager() {
  {
    Lock lock(table_.mu);
    pool_stopping_ = true;
  }
  pool_cv_.notify_all();
  if (pool_thread_.joinable()) pool_thread_.join();
  teardowns_.reset();  // finishes the queued teardowns
  blocking_.join();
}

runtime::StartSpec SandboxManager::SpecOf(const SandboxRecord& r) const {
  runtime::StartSpec s;
  s.id = r.id;
  s.layers = LayerPaths(r.layers_json);
  s.dir = DirOf(r.id);
  s.hostname = r.id;
  auto ds = json::parse(r.disks_json, nullptr, false);
  if (ds.is_array() && disks_)
    for (const auto& d : ds)
      if (d.is_object() && d.contains("id") && d.contains("mount_path"))
        s.binds.push_back({disks_->MountPath(d["id"].get<std::string>()), d["mount_path"].get<std::string>()});
  s.limits.cpus = static_cast<int>(r.cpus);
  s.limits.memory_bytes = static_cast<uint64_t>(r.memory_mb) << 20;
  s.limits.disk_bytes = static_cast<uint64_t>(r.disk_mb) << 20;
  s.limits.pids = static_cast<int>(r.pids);
  s.no_new_privs = r.no_new_privs;
  s.link = LinkOfRow(r);
  s.nameserver = Nameserver();
  return s;
}

SandboxView SandboxManager::View(const Entry& e) const {
  SandboxView v = ViewLocked(e);
  AddHostFacts(&v);
  return v;
}

SandboxView SandboxManager::ViewLocked(const Entry& e) const {
  SandboxView v;
  v.rec = e.rec;
  std::tie(v.billed_seconds, v.cost_usd) = metering_.Billed(e.rec);
  if (auto link = LinkOfRow(e.rec)) {
    v.address = net::Address::V4(link->sandbox).ToString();
    if (link->has_v6) v.address6 = net::Address{true, link->sandbox6}.ToString();
  }
  v.network_mbps = MbpsOf(e.rec);
  return v;
}

void SandboxManager::AddHostFacts(SandboxView* v) const {
  std::tie(v->tx_bytes, v->rx_bytes) = RowNetworkBytes(v->rec, v->rec.state == StateName(State::kRunning) ||
                                                                    v->rec.state == StateName(State::kPaused));
  if (runtime::Runtime* rt = runtimes_->Find(v->rec.isolation)) v->accel = rt->Accelerator();
}

Result<SandboxStats> SandboxManager::Stats(const std::string& id) {
  SandboxStats out;
  runtime::Instance inst;
  runtime::Runtime* rt;
  {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
    const bool frozen = e->is(State::kPaused) && e->rec.pause_mode == "freeze";
    if ((!e->is(State::kRunning) && !frozen) || e->busy)
      return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " +
                                                      (e->busy ? std::string("changing state") : e->rec.state) +
                                                      (e->is(State::kPaused) ? " (hibernated)" : "") +
                                                      ": nothing of it runs to measure");
    out.id = id;
    out.state = e->rec.state;
    out.cpus = static_cast<double>(e->rec.cpus);
    out.memory_limit_bytes = static_cast<uint64_t>(e->rec.memory_mb) << 20;
    out.pids_limit = static_cast<uint64_t>(e->rec.pids);
    out.disk_limit_bytes = static_cast<uint64_t>(e->rec.disk_mb) << 20;
    inst = e->inst;
    rt = &Rt(e->rec);
  }
  SBX_ASSIGN_OR_RETURN(auto u, rt->ReadUsage(id, inst));
  out.read_ms = Now();
  out.cpu_ns = u.cpu_ns;
  out.memory_bytes = u.memory_bytes;
  out.processes = u.processes;
  return out;
}

Result<std::string> SandboxManager::ResolveSandbox(const std::string& ref, bool active) {
  Lock lock(table_.mu);
  SBX_ASSIGN_OR_RETURN(std::string id, table_.Resolve(ref));
  if (EntryPtr e = active ? table_.Get(id) : nullptr) e->last_active_ms = Now();
  return id;
}

std::string SandboxManager::ResolveOwnSandbox(const std::string& own, const std::string& ref, bool active) {
  Lock lock(table_.mu);
  EntryPtr e = table_.Get(own);
  if (!e || e->is(State::kPooled) || (ref != own && (e->rec.name.empty() || ref != e->rec.name))) return ref;
  if (active) e->last_active_ms = Now();
  return own;
}

bool SandboxManager::MarkActive(const std::string& id) {
  Lock lock(table_.mu);
  EntryPtr e = table_.Get(id);
  if (!e || e->is(State::kPooled)) return false;
  e->last_active_ms = Now();
  return true;
}

Result<SandboxView> SandboxManager::Get(const std::string& id) {
  SandboxView v;
  {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
    v = ViewLocked(*e);
  }
  AddHostFacts(&v);
  return v;
}

Result<std::vector<SandboxView>> SandboxManager::List(const ListFilter& f) {
  if (!f.state.empty() && (f.state != StateName(ParseState(f.state)) || f.state == StateName(State::kPooled)))
    return MakeError(Code::kInvalidArgument, "unknown state \"" + f.state +
                                                 "\": one of creating, running, paused, stopped, error, deleting");
  std::vector<SandboxView> out;
  {
    Lock lock(table_.mu);
    for (const auto& [_, e] : table_.live()) {
      if (!f.name.empty() && e->rec.name != f.name) continue;
      if (!f.state.empty() && e->rec.state != f.state) continue;
      if (!f.metadata.empty()) {
        auto md = json::parse(e->rec.metadata_json, nullptr, false);
        bool match = md.is_object();
        for (const auto& [k, v] : f.metadata)
          if (!match || !md.contains(k) || !md[k].is_string() || md[k].get<std::string>() != v) match = false;
        if (!match) continue;
      }
      out.push_back(ViewLocked(*e));
    }
  }
  // What the host says of each (sysfs reads), without the lock.
  for (auto& v : out) AddHostFacts(&v);
  std::sort(out.begin(), out.end(), [](const SandboxView& a, const SandboxView& b) {
    return a.rec.created_ms != b.rec.created_ms ? a.rec.created_ms < b.rec.created_ms : a.rec.id < b.rec.id;
  });
  return out;
}

Result<SandboxView> SandboxManager::Update(const std::string& id, const UpdateRequest& req) {
  if (req.ttl_seconds && (*req.ttl_seconds < 1 || *req.ttl_seconds > opts_.max_ttl_seconds))
    return MakeError(Code::kInvalidArgument, "ttl_seconds must be between 1 and " + std::to_string(opts_.max_ttl_seconds));
  if (req.ttl_action && *req.ttl_action != "stop" && *req.ttl_action != "pause" && *req.ttl_action != "delete")
    return MakeError(Code::kInvalidArgument, "ttl_action must be \"stop\", \"pause\" or \"delete\"");
  if (req.idle_timeout_seconds && (*req.idle_timeout_seconds < 0 || *req.idle_timeout_seconds > opts_.max_ttl_seconds))
    return MakeError(Code::kInvalidArgument, "idle_timeout_seconds must be between 0 (off) and " +
                                                 std::to_string(opts_.max_ttl_seconds));
  Lock lock(table_.mu);
  SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
  SandboxRecord r = e->rec;
  int64_t now = Now();
  if (req.ttl_seconds) {
    r.ttl_seconds = *req.ttl_seconds;
    // From now; for a paused sandbox, from the moment it was paused (its clock stands still).
    r.expires_ms = (e->is(State::kPaused) ? r.paused_ms : now) + r.ttl_seconds * 1000;
  }
  if (req.ttl_action) r.ttl_action = *req.ttl_action;
  if (req.idle_timeout_seconds) r.idle_timeout_seconds = *req.idle_timeout_seconds;
  if (req.auto_resume) r.auto_resume = *req.auto_resume;
  if (req.public_ports) r.public_ports = *req.public_ports;
  SBX_RETURN_IF_ERROR(store_->UpdateSandbox(r));
  e->rec = r;
  e->last_active_ms = now;
  return View(*e);
}

bool SandboxManager::PortsArePublic(const std::string& id) {
  Lock lock(table_.mu);
  auto e = table_.Get(id);
  return e && e->rec.public_ports;
}

Result<std::pair<std::string, int64_t>> SandboxManager::GrantPort(const std::string& id, int port,
                                                                  int64_t ttl_seconds) {
  if (ttl_seconds < 1 || ttl_seconds > 7 * 86400)
    return MakeError(Code::kInvalidArgument, "ttl_seconds must be 1 to 604800 (7 days)");
  if (port < 1 || port > 65535) return MakeError(Code::kInvalidArgument, "port must be 1 to 65535");
  {
    Lock lock(table_.mu);
    if (!table_.Get(id)) return MakeError(Code::kNotFound, "sandbox " + id + " not found");
  }
  int64_t expires = Now() / 1000 + ttl_seconds;
  std::string grant = secrets_.PortGrant(id, port, expires);
  if (grant.empty()) return MakeError(Code::kFailedPrecondition, "sbxd has no signing key");
  return std::make_pair(grant, expires);
}

bool SandboxManager::PortGrantValid(const std::string& id, int port, const std::string& grant) {
  if (!secrets_.CheckPortGrant(grant, id, port, Now() / 1000)) return false;
  Lock lock(table_.mu);
  return table_.Get(id) != nullptr;  // deleted: its grants are dead
}

std::optional<std::string> SandboxManager::SandboxOfPeer(int fd) const {
  for (const auto& [kind, rt] : runtimes_->all())
    if (auto id = rt->SandboxOfPeer(fd); id && ValidName(*id)) return id;
  return std::nullopt;
}

std::optional<std::string> SandboxManager::SandboxOfToken(const std::string& token) {
  auto id = Secrets::IdOfToken(token);
  if (!id) return std::nullopt;
  Lock lock(table_.mu);
  EntryPtr e = table_.Get(*id);
  // Deleted: its token is dead; an earlier generation's (held by a memory capture) too.
  if (!e || !secrets_.CheckToken(token, *id, e->rec.token_gen)) return std::nullopt;
  return id;
}

StoreStats SandboxManager::StoreUse() {
  Lock lock(table_.mu);
  return admission_.StoreUse(table_);
}

SandboxManager::Features SandboxManager::GetFeatures() const {
  Features f;
  f.store = admission_.has_store();
  for (const auto& [kind, rt] : runtimes_->all()) {
    f.isolation.push_back(kind);
    if (rt->Caps().hibernate) f.hibernate_isolation.push_back(kind);
    if (rt->Caps().memory_snapshots) f.memory_isolation.push_back(kind);
    f.hibernate = f.hibernate || rt->Caps().hibernate;
    if (kind == "microvm") {
      f.microvm_accel = rt->Accelerator();
      f.microvm_channel = rt->AgentChannel();
    }
  }
  return f;
}

SandboxManager::Counts SandboxManager::GetCounts() {
  Counts c;
  std::vector<std::pair<SandboxRecord, bool>> counted;  // whose bytes to add up, linked or not
  for (const auto& [kind, _] : runtimes_->all())
    for (State s : {State::kCreating, State::kRunning, State::kPaused, State::kStopped, State::kError,
                    State::kDeleting})
      c.by_state[{StateName(s), kind}] = 0;
  {
    Lock lock(table_.mu);
    for (const auto& [_, e] : table_.deleting()) {
      ++c.by_state[{StateName(State::kDeleting), e->rec.isolation}];
      ++c.deleting;
    }
    for (const auto& [_, e] : table_.live()) {
      ++c.by_state[{e->rec.state, e->rec.isolation}];
      if (!e->is(State::kPooled))
        counted.emplace_back(e->rec, e->is(State::kRunning) || e->is(State::kPaused));
      switch (e->state()) {
        case State::kRunning: ++c.running; break;
        case State::kPaused: ++c.paused; break;
        case State::kStopped: ++c.stopped; break;
        case State::kError: ++c.error; break;
        case State::kCreating: ++c.creating; break;
        default: break;
      }
    }
    c.creates = creates_;
    c.execs = execs_;
    c.deletes = deletes_;
    c.snapshots = snapshots_;
    c.forks = forks_;
    c.pauses = pauses_;
    c.resumes = resumes_;
    for (const auto& [_, q] : pool_) c.pooled += static_cast<int>(q.size());
    c.pool_claims = pool_claims_;
  }
  // The links' counters (sysfs reads), without the lock.
  for (const auto& [r, linked] : counted) {
    auto [tx, rx] = RowNetworkBytes(r, linked);
    c.net_tx_bytes += tx;
    c.net_rx_bytes += rx;
  }
  if (network_) {
    const auto& r = network_->resolver_stats();
    c.dns_queries = r.queries;
    c.dns_refused = r.refused;
    c.dns_rebinding = r.rebinding;
    c.dns_rate_limited = r.rate_limited;
  }
  return c;
}

}  // namespace sbx::core
