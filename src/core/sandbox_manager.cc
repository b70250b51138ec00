#include "core/sandbox_manager.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/crypto.h"
#include "base/fault.h"
#include "base/fs.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/scope_exit.h"

namespace sbx::core {

namespace asio = boost::asio;
using nlohmann::json;
using storage::SandboxRecord;

namespace {

// Background work (teardowns, pool refills) runs at idle CPU priority so that it never
// slows the commands of live sandboxes; processes it starts get normal priority back.
void BecomeIdle() {
  struct sched_param sp = {};
  if (::sched_setscheduler(0, SCHED_IDLE | SCHED_RESET_ON_FORK, &sp) != 0)
    SBX_LOG(kDebug) << "cannot lower the priority of a background thread";
}

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// An absolute, normalized path of at most 255 bytes, no "." or ".." parts, no control
// characters, and not under /proc, /sys or /dev.
bool ValidMountPath(const std::string& path) {
  if (path.size() < 2 || path.size() > 255 || path[0] != '/' || path.back() == '/') return false;
  size_t i = 1;
  bool first = true;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    for (unsigned char c : part)
      if (c < 0x20 || c == 0x7f) return false;
    if (first && (part == "proc" || part == "sys" || part == "dev")) return false;
    first = false;
    i = j + 1;
  }
  return true;
}

Status ValidateEnv(const std::map<std::string, std::string>& env, const char* what) {
  for (const auto& [k, v] : env) {
    if (k.empty() || k.size() > 1024 || k.find('=') != std::string::npos ||
        k.find('\0') != std::string::npos || v.find('\0') != std::string::npos)
      return MakeError(Code::kInvalidArgument, std::string("invalid ") + what + " variable name \"" + k + "\"");
  }
  return OkStatus();
}

}  // namespace

SandboxManager::SandboxManager(ManagerOptions opts, storage::Store* store,
                               layers::ImageStore* images, const runtime::Registry* runtimes,
                               TypeTable types)
    : opts_(std::move(opts)), store_(store), images_(images), runtimes_(runtimes),
      types_(std::move(types)) {
  budget_ = StoreBudget(opts_.store_dir, opts_.store_mb, opts_.min_free_mb, opts_.store_overcommit);
  if (!opts_.now_ms) opts_.now_ms = [] { return NowUnixMs(); };
  for (int i = 0; i < std::max(1, opts_.teardown_threads); ++i)
    teardown_threads_.emplace_back([this] {
      BecomeIdle();
      TeardownLoop();
    });
  if (opts_.pool_size > 0)
    pool_thread_ = std::thread([this] {
      BecomeIdle();
      PoolLoop();
    });
}

SandboxManager::~SandboxManager() {
  {
    std::lock_guard<std::mutex> lock(tq_mu_);
    stopping_ = true;
  }
  tq_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool_cv_.notify_all();
  }
  if (pool_thread_.joinable()) pool_thread_.join();
  for (auto& t : teardown_threads_) t.join();
}

std::vector<std::string> SandboxManager::LayerPaths(const std::string& layers_json) {
  std::vector<std::string> out;
  auto arr = json::parse(layers_json, nullptr, false);
  if (arr.is_array())
    for (const auto& l : arr)
      if (l.is_string()) out.push_back(l.get<std::string>());
  return out;
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
  return s;
}

SandboxView SandboxManager::ViewLocked(const Entry& e) const {
  SandboxView v;
  v.rec = e.rec;
  int64_t ms = e.rec.billed_ms;
  if (e.rec.state == "running" && e.rec.started_ms > 0) ms += std::max<int64_t>(0, Now() - e.rec.started_ms);
  v.billed_seconds = ms / 1000.0;
  auto t = types_.Find(e.rec.type);
  v.cost_usd = t.ok() ? CostUsd(ms, t->usd_per_hour) : 0;
  return v;
}

void SandboxManager::CloseBilling(SandboxRecord& r) {
  if (r.state == "running" && r.started_ms > 0) {
    int64_t now = Now();
    r.billed_ms += std::max<int64_t>(0, now - r.started_ms);
    if (r.billing == "time") {
      Status st = store_->ClosePeriod(r.id, now);
      if (!st.ok()) SBX_LOG(kError) << "closing the billing period of " << r.id << ": " << st.error().message;
    }
  }
  r.started_ms = 0;
}

void SandboxManager::OpenBilling(SandboxRecord& r) {
  r.started_ms = Now();
  if (r.billing != "time") return;
  auto t = types_.Find(r.type);
  Status st = store_->OpenPeriod({r.id, r.name, r.type, t.ok() ? t->usd_per_hour : 0, r.started_ms, 0});
  if (!st.ok()) SBX_LOG(kError) << "opening the billing period of " << r.id << ": " << st.error().message;
}

Status SandboxManager::CheckDataDirSpace() const {
  struct statvfs v;
  if (::statvfs(opts_.data_dir.c_str(), &v) != 0) return OkStatus();  // unknown: let the write tell
  int64_t free_mb = static_cast<int64_t>((static_cast<unsigned __int128>(v.f_bavail) * v.f_frsize) >> 20);
  int64_t free_inodes = v.f_files ? static_cast<int64_t>(v.f_favail) : INT64_MAX;
  if (free_mb < opts_.min_free_mb || free_inodes < 1024)
    return MakeError(Code::kUnavailable, "sbxd's data dir is full (" + std::to_string(free_mb) + " MB free, " +
                                             std::to_string(opts_.min_free_mb) +
                                             " MB kept in reserve); free space and try again");
  return OkStatus();
}

int64_t SandboxManager::CommittedDiskMbLocked() const {
  int64_t sum = 0;
  for (const auto& [_, e] : sandboxes_) sum += e->rec.disk_mb;
  return sum;
}

std::optional<std::string> SandboxManager::SandboxOfPeer(int fd) const {
  for (const auto& [kind, rt] : runtimes_->all())
    if (auto id = rt->SandboxOfPeer(fd); id && ValidName(*id)) return id;
  return std::nullopt;
}

StoreStats SandboxManager::StoreUse() {
  std::lock_guard<std::mutex> lock(mu_);
  return budget_.Stats(CommittedDiskMbLocked());
}

int64_t SandboxManager::DiskMbFor(const CreateRequest& req, const SandboxType& type) const {
  return budget_.Clamp(std::min<int64_t>(req.disk_mb.value_or(type.disk_mb), type.disk_mb));
}

Status SandboxManager::CheckQuotaLocked(int add, int64_t memory_mb, int64_t disk_mb) const {
  SBX_RETURN_IF_ERROR(budget_.CheckCommit(CommittedDiskMbLocked(), disk_mb));
  const Quotas& q = opts_.quotas;
  if (!q.max_sandboxes && !q.max_memory_mb && !q.max_disk_mb) return OkStatus();
  int live = 0;
  int64_t mem = 0, disk = 0;
  for (const auto& [_, e] : sandboxes_) {
    const auto& r = e->rec;
    disk += r.disk_mb;
    // Frozen: memory held. Hibernated: its memory is on disk, it holds none.
    if (r.state == "creating" || r.state == "running" || (r.state == "paused" && r.pause_mode != "hibernate")) {
      ++live;
      mem += r.memory_mb;
    }
  }
  if (q.max_sandboxes && live + add > q.max_sandboxes)
    return MakeError(Code::kResourceExhausted, "quota exceeded: at most " + std::to_string(q.max_sandboxes) +
                                                   " live sandboxes (" + std::to_string(live) + " now)");
  if (q.max_memory_mb && mem + memory_mb > q.max_memory_mb)
    return MakeError(Code::kResourceExhausted,
                     "quota exceeded: " + std::to_string(mem) + " MB of memory held of " +
                         std::to_string(q.max_memory_mb) + ", this one needs " + std::to_string(memory_mb));
  if (q.max_disk_mb && disk_mb > 0 && disk + disk_mb > q.max_disk_mb)
    return MakeError(Code::kResourceExhausted,
                     "quota exceeded: " + std::to_string(disk) + " MB of disk held of " +
                         std::to_string(q.max_disk_mb) + ", this one needs " + std::to_string(disk_mb));
  return OkStatus();
}

Result<std::shared_ptr<SandboxManager::Entry>> SandboxManager::Find(const std::string& id) {
  if (!ValidName(id)) return MakeError(Code::kInvalidArgument, "invalid sandbox id");
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return MakeError(Code::kNotFound, "sandbox " + id + " not found");
  return it->second;
}

Result<SandboxView> SandboxManager::Create(const CreateRequest& req) {
  SBX_ASSIGN_OR_RETURN(SandboxType type, types_.Find(req.type));
  if (!runtimes_->Find(req.isolation))
    return MakeError(Code::kInvalidArgument,
                     req.isolation == "gvisor" || req.isolation == "microvm"
                         ? "isolation \"" + req.isolation + "\" is not available on this sbxd yet"
                         : "unknown isolation \"" + req.isolation + "\" (container, gvisor, microvm)");
  if (!req.name.empty() && !ValidName(req.name))
    return MakeError(Code::kInvalidArgument, "invalid name: names match [a-z0-9][a-z0-9._-]{0,62}");
  int64_t ttl = req.ttl_seconds.value_or(opts_.default_ttl_seconds);
  if (ttl < 1 || ttl > opts_.max_ttl_seconds)
    return MakeError(Code::kInvalidArgument, "ttl_seconds must be between 1 and " + std::to_string(opts_.max_ttl_seconds));
  if (req.ttl_action != "stop" && req.ttl_action != "pause")
    return MakeError(Code::kInvalidArgument, "ttl_action must be \"stop\" or \"pause\"");
  if (req.idle_timeout_seconds < 0 || req.idle_timeout_seconds > opts_.max_ttl_seconds)
    return MakeError(Code::kInvalidArgument, "idle_timeout_seconds must be between 0 (off) and " +
                                                 std::to_string(opts_.max_ttl_seconds));
  if (req.network_mode != "none")
    return MakeError(Code::kInvalidArgument, req.network_mode == "outbound"
                                                 ? "network mode \"outbound\" is not available on this sbxd yet"
                                                 : "network mode must be \"none\" or \"outbound\"");
  SBX_RETURN_IF_ERROR(ValidateEnv(req.env, "env"));
  if (!req.disks.empty()) {
    if (!disks_) return MakeError(Code::kInvalidArgument, "disks are not available on this sbxd");
    if (req.disks.size() > 8) return MakeError(Code::kInvalidArgument, "at most 8 disks per sandbox");
    std::set<std::string> paths;
    for (const auto& [id, path] : req.disks) {
      SBX_ASSIGN_OR_RETURN(auto disk, disks_->Get(id));
      (void)disk;
      if (!ValidMountPath(path))
        return MakeError(Code::kInvalidArgument, "invalid mount_path \"" + path +
                                                     "\": an absolute, normalized path outside /proc, /sys and /dev");
      if (!paths.insert(path).second) return MakeError(Code::kInvalidArgument, "two disks on " + path);
    }
  }
  if (req.cpus && (*req.cpus < 1 || *req.cpus > 256))
    return MakeError(Code::kInvalidArgument, "resources.cpus must be between 1 and 256");
  if (req.memory_mb && (*req.memory_mb < 16 || *req.memory_mb > (int64_t{1} << 22)))
    return MakeError(Code::kInvalidArgument, "resources.memory_mb must be between 16 and 4194304");
  if (req.disk_mb && (*req.disk_mb < 16 || *req.disk_mb > (int64_t{1} << 24)))
    return MakeError(Code::kInvalidArgument, "resources.disk_mb must be between 16 and 16777216");
  if (req.disk_mb) SBX_RETURN_IF_ERROR(budget_.CheckRequest(*req.disk_mb));
  if (req.pids && (*req.pids < 16 || *req.pids > 1 << 22))
    return MakeError(Code::kInvalidArgument, "resources.pids must be between 16 and 4194304");
  if (!req.from.empty()) {
    if (!ValidName(req.from)) return MakeError(Code::kInvalidArgument, "invalid snapshot name");
    if (!req.image.empty())
      return MakeError(Code::kInvalidArgument, "give either image or from, not both");
    SBX_ASSIGN_OR_RETURN(auto snap, GetSnapshot(req.from));
    std::vector<std::string> layers = LayerPaths(snap.layers_json);
    if (layers.empty()) return MakeError(Code::kInternal, "snapshot " + req.from + " has no layers");
    return CreateOn(req, snap.image, layers);
  }
  std::string image_name = req.image.empty() ? opts_.default_image : req.image;
  if (!ValidName(image_name)) return MakeError(Code::kInvalidArgument, "invalid image name");
  SBX_ASSIGN_OR_RETURN(auto image, images_->Get(image_name));
  return CreateOn(req, image_name, {image.path});
}

storage::SandboxRecord SandboxManager::MakeRecord(const CreateRequest& req, const SandboxType& type,
                                                  const std::string& image_name,
                                                  const std::vector<std::string>& layers) {
  SandboxRecord r;
  r.id = NewId("sb");
  r.name = req.name;
  r.state = "creating";
  r.type = type.name;
  r.isolation = req.isolation;
  r.image = image_name;
  r.from_snapshot = req.from;
  r.layers_json = json(layers).dump();
  r.cpus = req.cpus.value_or(type.cpus);
  r.memory_mb = req.memory_mb.value_or(type.memory_mb);
  r.disk_mb = DiskMbFor(req, type);
  r.pids = req.pids.value_or(type.pids);
  r.ttl_seconds = req.ttl_seconds.value_or(opts_.default_ttl_seconds);
  r.ttl_action = req.ttl_action;
  r.idle_timeout_seconds = req.idle_timeout_seconds;
  r.auto_resume = req.auto_resume;
  r.public_ports = req.public_ports;
  r.billing = req.per_call ? "call" : "time";
  r.no_env = req.no_env;
  r.env_json = json(req.env).dump();
  r.metadata_json = json(req.metadata).dump();
  r.network_json = json{{"mode", req.network_mode}}.dump();
  json ds = json::array();
  for (const auto& [id, path] : req.disks) {
    // Stored by id: a name may be reused by another disk later.
    std::string disk_id = id;
    if (disks_) {
      auto d = disks_->Get(id);
      if (d.ok()) disk_id = d->id;
    }
    ds.push_back({{"id", disk_id}, {"mount_path", path}});
  }
  r.disks_json = ds.dump();
  r.created_ms = Now();
  return r;
}

Result<SandboxView> SandboxManager::CreateOn(const CreateRequest& req, const std::string& image_name,
                                             const std::vector<std::string>& layers, bool use_pool) {
  SBX_ASSIGN_OR_RETURN(SandboxType type, types_.Find(req.type));
  SBX_RETURN_IF_ERROR(CheckDataDirSpace());
  {
    std::lock_guard<std::mutex> lock(mu_);
    SBX_RETURN_IF_ERROR(CheckQuotaLocked(1, req.memory_mb.value_or(type.memory_mb), DiskMbFor(req, type)));
  }
  if (use_pool && opts_.pool_size > 0) {
    // The key: the isolation kind, the root's layers, and the disks bound at boot
    // (repeated serverless calls on one disk claim sandboxes that already have it).
    json disk_key = json::array();
    for (const auto& [d, path] : req.disks) disk_key.push_back({d, path});
    std::string key = req.isolation + " " + (req.disks.empty() ? json(layers).dump() : json{layers, disk_key}.dump());
    std::shared_ptr<Entry> pooled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& k = wanted_[key];
      k.isolation = req.isolation;
      k.image = image_name;
      k.from = req.from;
      k.layers = layers;
      k.disks = req.disks;
      k.last_used_ms = Now();
      pooled = TakePooled(key);
      pool_cv_.notify_all();
    }
    if (pooled) {
      auto v = Claim(pooled, req, type);
      if (v.ok() || v.error().code == Code::kAlreadyExists) return v;
      SBX_LOG(kWarn) << "claiming pooled sandbox " << pooled->rec.id << ": " << v.error().message
                     << "; creating one instead";
    }
  }
  auto e = std::make_shared<Entry>();
  e->rec = MakeRecord(req, type, image_name, layers);
  SandboxRecord& r = e->rec;
  e->busy = true;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!r.name.empty())
      for (const auto& [_, other] : sandboxes_)
        if (other->rec.name == r.name)
          return MakeError(Code::kAlreadyExists, "a sandbox named \"" + r.name + "\" exists");
    SBX_RETURN_IF_ERROR(CheckQuotaLocked(1, r.memory_mb, r.disk_mb));
    // The row comes first: a crash from here on leaves a row that Recover() resolves.
    auto st = store_->InsertSandbox(r);
    if (!st.ok()) {
      if (st.error().code == Code::kAlreadyExists)
        return MakeError(Code::kAlreadyExists, "a sandbox named \"" + r.name + "\" exists");
      return st.error();
    }
    sandboxes_[r.id] = e;
  }
  FaultPoint("create.row_inserted");

  runtime::StartSpec spec = SpecOf(r);
  runtime::Runtime& rt = Rt(r);
  Status prepared = rt.Prepare(spec);
  Result<runtime::Instance> inst = prepared.ok() ? rt.Start(spec) : Result<runtime::Instance>(prepared.error());

  FaultPoint("create.started");
  std::unique_lock<std::mutex> lock(mu_);
  e->busy = false;
  settled_cv_.notify_all();
  bool deleted = sandboxes_.find(r.id) == sandboxes_.end();
  if (!inst.ok()) {
    // Nothing of a failed create stays: no row, no files, no cgroup.
    sandboxes_.erase(r.id);
    lock.unlock();
    (void)rt.Destroy(r.id, spec.dir);
    (void)store_->DeleteSandbox(r.id);
    return OnDataDir(inst.error());
  }
  e->inst = *inst;
  if (deleted) {
    // Deleted while it was being created: the queued teardown finishes it.
    return MakeError(Code::kNotFound, "sandbox " + r.id + " was deleted while it was created");
  }
  r.state = "running";
  r.runtime_state = inst->saved_state;
  OpenBilling(r);
  r.expires_ms = r.started_ms + r.ttl_seconds * 1000;
  e->last_active_ms = r.started_ms;
  Status st = store_->UpdateSandbox(r);
  if (!st.ok()) SBX_LOG(kError) << "persisting sandbox " << r.id << ": " << st.error().message;
  ++creates_;
  return ViewLocked(*e);
}

void SandboxManager::DiscardLocked(const std::shared_ptr<Entry>& e) {
  e->rec.state = "deleting";
  (void)store_->UpdateSandbox(e->rec);
  deleting_[e->rec.id] = e;
  EnqueueTeardown(e->rec.id);
}

std::shared_ptr<SandboxManager::Entry> SandboxManager::TakePooled(const std::string& key) {
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

Result<SandboxView> SandboxManager::Claim(std::shared_ptr<Entry> e, const CreateRequest& req,
                                          const SandboxType& type) {
  // Only what is per-sandbox changes: the pooled sandbox has run nothing, so it is
  // exactly what a cold create would have made.
  SandboxRecord claimed = MakeRecord(req, type, e->rec.image, {});
  claimed.id = e->rec.id;
  claimed.layers_json = e->rec.layers_json;
  claimed.disks_json = e->rec.disks_json;
  claimed.runtime_state = e->rec.runtime_state;
  runtime::Limits limits{static_cast<int>(claimed.cpus), static_cast<uint64_t>(claimed.memory_mb) << 20,
                         static_cast<int>(claimed.pids)};
  auto give_back = [&] {
    std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  if (!claimed.name.empty())
    for (const auto& [_, other] : sandboxes_)
      if (other->rec.name == claimed.name) {
        DiscardLocked(e);
        return MakeError(Code::kAlreadyExists, "a sandbox named \"" + claimed.name + "\" exists");
      }
  if (Status q = CheckQuotaLocked(1, claimed.memory_mb, claimed.disk_mb); !q.ok()) {
    DiscardLocked(e);
    return q.error();
  }
  claimed.state = "running";
  OpenBilling(claimed);
  claimed.expires_ms = claimed.started_ms + claimed.ttl_seconds * 1000;
  SandboxRecord before = e->rec;
  e->rec = claimed;
  Status st = store_->UpdateSandbox(e->rec);
  if (!st.ok()) {
    (void)store_->ClosePeriod(claimed.id, claimed.started_ms);  // nothing was billed
    e->rec = before;
    DiscardLocked(e);
    if (st.error().code == Code::kAlreadyExists)
      return MakeError(Code::kAlreadyExists, "a sandbox named \"" + claimed.name + "\" exists");
    return st.error();
  }
  e->last_active_ms = e->rec.started_ms;
  sandboxes_[e->rec.id] = e;
  ++creates_;
  ++pool_claims_;
  return ViewLocked(*e);
}

bool SandboxManager::FillOne(const std::string& key, const PoolKey& k) {
  auto type = types_.Find("small");
  if (!type.ok()) return false;
  for (const auto& l : k.layers)
    if (!fs::IsDir(l)) {
      // Its image or template is gone: nothing to keep warm.
      std::lock_guard<std::mutex> lock(mu_);
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
  e->rec.state = "pooled";
  // The row first, so a crash leaves something Recover() removes.
  if (!store_->InsertSandbox(e->rec).ok()) return false;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Runtime& rt = Rt(e->rec);
  Status st = rt.Prepare(spec);
  Result<runtime::Instance> inst = st.ok() ? rt.Start(spec) : Result<runtime::Instance>(st.error());
  if (inst.ok()) {
    // Walk the root once, so the first command of its user finds its files cached.
    Status warm = agent::WarmBlocking(*inst->agent, 60000);
    if (!warm.ok()) SBX_LOG(kWarn) << "warming pooled sandbox " << e->rec.id << ": " << warm.error().message;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!inst.ok()) {
    SBX_LOG(kWarn) << "filling the pool: " << inst.error().message;
    DiscardLocked(e);
    return false;
  }
  e->inst = *inst;
  e->rec.runtime_state = inst->saved_state;
  (void)store_->UpdateSandbox(e->rec);
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
  for (auto& e : it->second) {
    DiscardLocked(e);
  }
  pool_.erase(it);
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
      std::unique_lock<std::mutex> lock(mu_);
      {
        std::lock_guard<std::mutex> tl(tq_mu_);
        if (stopping_) return;
      }
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
      for (const auto& [_, e] : sandboxes_)
        if (e->rec.state != "pooled" && (e->active_execs > 0 || now - e->last_active_ms < 200)) busy = true;
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
    std::lock_guard<std::mutex> lock(mu_);
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

Result<SandboxView> SandboxManager::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  SBX_ASSIGN_OR_RETURN(auto e, Find(id));
  return ViewLocked(*e);
}

Result<std::vector<SandboxView>> SandboxManager::List(const ListFilter& f) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SandboxView> out;
  for (const auto& [_, e] : sandboxes_) {
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
  std::sort(out.begin(), out.end(), [](const SandboxView& a, const SandboxView& b) {
    return a.rec.created_ms != b.rec.created_ms ? a.rec.created_ms < b.rec.created_ms : a.rec.id < b.rec.id;
  });
  return out;
}

Status SandboxManager::Delete(const std::string& id) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SBX_ASSIGN_OR_RETURN(e, Find(id));
    CloseBilling(e->rec);
    std::string prev = e->rec.state;
    e->rec.state = "deleting";
    Status st = store_->UpdateSandbox(e->rec);
    if (!st.ok()) {
      e->rec.state = prev;
      return st.error().Wrap("deleting " + id);
    }
    sandboxes_.erase(id);
    deleting_[id] = e;
    ++deletes_;
  }
  FaultPoint("delete.marked");
  EnqueueTeardown(id);
  return OkStatus();
}

void SandboxManager::EnqueueTeardown(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(tq_mu_);
    teardown_queue_.push_back(id);
  }
  tq_cv_.notify_one();
}

void SandboxManager::TeardownLoop() {
  while (true) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(tq_mu_);
      tq_cv_.wait(lock, [&] { return stopping_ || !teardown_queue_.empty(); });
      if (teardown_queue_.empty()) return;
      id = teardown_queue_.front();
      teardown_queue_.pop_front();
      ++teardown_active_;
    }
    // A create or start still in flight holds `busy`: let it settle, then stop what it
    // started, so no process outlives the delete. A restore from hibernation is cut
    // short instead: its processes (and CRIU, which runs in the sandbox's cgroup) are
    // killed, so the delete waits neither for a large checkpoint nor for a restored agent
    // that does not answer.
    runtime::Instance inst;
    runtime::Runtime* rt = runtimes_->layers();
    bool cancelled = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        auto it = deleting_.find(id);
        if (it != deleting_.end()) rt = &Rt(it->second->rec);
        if (it == deleting_.end() || (!it->second->busy && it->second->captures == 0)) {
          if (it != deleting_.end()) inst = it->second->inst;
          break;
        }
        if (it->second->restoring && !cancelled) {
          cancelled = true;
          lock.unlock();
          Status killed = rt->Stop(id, runtime::Instance());
          if (!killed.ok()) SBX_LOG(kWarn) << "cancelling the restore of " << id << ": " << killed.error().message;
          lock.lock();
          continue;
        }
        // Woken when a transition or a capture ends (the timeout only bounds a missed wake).
        settled_cv_.wait_for(lock, std::chrono::milliseconds(200));
      }
    }
    // The checkpoint goes before the sandbox's folder: a folder gone means all of it is.
    Status st = rt->Stop(id, inst);
    if (st.ok()) st = rt->DropCheckpoint(CheckpointDir(id));
    if (st.ok()) st = rt->Destroy(id, DirOf(id));
    if (st.ok()) st = store_->DeleteSandbox(id);
    if (!st.ok()) SBX_LOG(kError) << "teardown of " << id << ": " << st.error().message;
    {
      std::lock_guard<std::mutex> lock(mu_);
      deleting_.erase(id);
    }
    settled_cv_.notify_all();
    CollectLayers();
    {
      std::lock_guard<std::mutex> lock(tq_mu_);
      --teardown_active_;
    }
    tq_cv_.notify_all();
  }
}

void SandboxManager::DrainTeardowns() {
  std::unique_lock<std::mutex> lock(tq_mu_);
  tq_cv_.wait(lock, [&] { return teardown_queue_.empty() && teardown_active_ == 0; });
}

Status SandboxManager::StopLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Entry>& e,
                                  const std::string& reason) {
  e->busy = true;
  runtime::Instance inst = e->inst;
  std::string id = e->rec.id;
  runtime::Runtime& rt = Rt(e->rec);
  lock.unlock();
  Status st = rt.Stop(id, inst);
  lock.lock();
  e->busy = false;
  settled_cv_.notify_all();
  if (!st.ok()) return st.error().Wrap("stopping " + id);
  if (e->rec.state == "deleting") return OkStatus();
  // A hibernated sandbox's checkpoint goes: a start boots it afresh.
  if (e->rec.pause_mode == "hibernate") (void)rt.DropCheckpoint(CheckpointDir(id));
  CloseBilling(e->rec);
  e->rec.state = "stopped";
  e->rec.pause_mode.clear();
  e->rec.paused_ms = 0;
  e->rec.runtime_state.clear();
  e->rec.error = reason;
  e->inst = runtime::Instance();
  return store_->UpdateSandbox(e->rec);
}

Result<SandboxView> SandboxManager::Stop(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  SBX_ASSIGN_OR_RETURN(auto e, Find(id));
  if (e->busy || e->captures)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state or being captured; try again");
  if (e->rec.state == "stopped") return ViewLocked(*e);
  if (e->rec.state != "running" && e->rec.state != "paused")
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e->rec.state + ", not running");
  SBX_RETURN_IF_ERROR(StopLocked(lock, e, ""));
  return ViewLocked(*e);
}

Result<SandboxView> SandboxManager::Start(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  SBX_ASSIGN_OR_RETURN(auto e, Find(id));
  if (e->busy || e->captures)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state or being captured; try again");
  if (e->rec.state == "running") return ViewLocked(*e);
  if (e->rec.state != "stopped" && e->rec.state != "error")
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e->rec.state);
  if (!Rt(e->rec).HasFiles(DirOf(id)))
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " has lost its files and cannot start");
  SBX_RETURN_IF_ERROR(CheckQuotaLocked(1, e->rec.memory_mb, 0));
  SBX_RETURN_IF_ERROR(CheckDataDirSpace());
  e->busy = true;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Runtime& rt = Rt(e->rec);
  lock.unlock();
  auto inst = rt.Start(spec);
  lock.lock();
  e->busy = false;
  settled_cv_.notify_all();
  if (!inst.ok()) return inst.error();
  if (e->rec.state == "deleting") return MakeError(Code::kNotFound, "sandbox " + id + " was deleted");
  e->inst = *inst;
  e->rec.state = "running";
  e->rec.error.clear();
  e->rec.runtime_state = inst->saved_state;
  OpenBilling(e->rec);
  e->rec.expires_ms = e->rec.started_ms + e->rec.ttl_seconds * 1000;
  e->last_active_ms = e->rec.started_ms;
  SBX_RETURN_IF_ERROR(store_->UpdateSandbox(e->rec));
  return ViewLocked(*e);
}

namespace {
// The bytes of the regular files below `dir` (links not followed).
uint64_t TreeBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec) && !it->is_symlink(fec)) total += it->file_size(fec);
  }
  return total;
}
}  // namespace

Result<std::vector<std::string>> SandboxManager::Capture(const std::string& id, uint64_t* bytes) {
  std::shared_ptr<Entry> e;
  bool running;
  std::vector<std::string> layers;
  runtime::Runtime* rt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SBX_ASSIGN_OR_RETURN(e, Find(id));
    rt = &Rt(e->rec);
    if (e->busy) return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state; try again");
    if (e->rec.state != "running" && e->rec.state != "stopped" && e->rec.state != "paused")
      return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e->rec.state);
    // A paused sandbox's processes already hold still: no freeze (and no thaw after).
    running = e->rec.state == "running";
    ++e->captures;
    ++capture_starts_;
    layers = LayerPaths(e->rec.layers_json);
  }
  ScopeExit release([&] {
    std::lock_guard<std::mutex> lock(mu_);
    --e->captures;
    settled_cv_.notify_all();
  });
  SBX_RETURN_IF_ERROR(CheckDataDirSpace());
  std::string base = opts_.data_dir + "/layers";
  SBX_RETURN_IF_ERROR(fs::MkdirAll(base, 0711));
  // Copied under a temporary name, renamed when whole: a crash leaves no half layer
  // under a real name (and the collector removes temporaries).
  std::string tmp = base + "/tmp-" + RandomHex(8);
  Result<runtime::Runtime::Captured> captured = MakeError(Code::kInternal, "not captured");
  {
    if (running) SBX_RETURN_IF_ERROR(rt->Freeze(id));
    ScopeExit thaw([&] {
      if (running) {
        Status st = rt->Thaw(id);
        if (!st.ok()) SBX_LOG(kError) << "thawing " << id << ": " << st.error().message;
      }
    });
    FaultPoint("snapshot.frozen");
    captured = rt->CaptureFiles(DirOf(id), tmp);
    FaultPoint("snapshot.copied");
  }
  if (!captured.ok()) {
    (void)rt->RemoveLayer(tmp);
    return OnDataDir(captured.error().Wrap("capturing " + id));
  }
  std::string dir = base + "/l-" + RandomHex(8);
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    Error err = ErrnoError("rename " + tmp);
    (void)rt->RemoveLayer(tmp);
    return err;
  }
  std::string layer = captured->root.empty() ? dir : dir + "/" + captured->root;
  // Its size is walked only when asked for (a named snapshot shows it; a fork does not).
  uint64_t size = bytes && !captured->bytes ? TreeBytes(layer) : captured->bytes.value_or(0);
  ::chmod(layer.c_str(), 0755);
  {
    // Until its caller has recorded it, the layer is in no row: keep the collector off it.
    std::lock_guard<std::mutex> lock(mu_);
    pending_layers_.insert(layer);
  }
  FaultPoint("snapshot.renamed");
  if (bytes) *bytes = size;
  layers.insert(layers.begin(), layer);
  return layers;
}

namespace {
bool UsesDisk(const storage::SandboxRecord& r, const std::string& disk_id) {
  auto ds = json::parse(r.disks_json, nullptr, false);
  if (ds.is_array())
    for (const auto& d : ds)
      if (d.is_object() && d.value("id", "") == disk_id) return true;
  return false;
}
}  // namespace

Status SandboxManager::DeleteDisk(const std::string& id) {
  if (!disks_) return MakeError(Code::kNotFound, "disk " + id + " not found");
  SBX_ASSIGN_OR_RETURN(auto disk, disks_->Get(id));
  {
    // Warm sandboxes waiting with this disk bound give it back first.
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> keys;
    for (const auto& [key, k] : wanted_)
      for (const auto& [d, _] : k.disks)
        if (d == id || d == disk.id || d == disk.name) keys.push_back(key);
    for (const auto& key : keys) DropPool(key);
  }
  {
    // A teardown that still holds the disk is waited for (at most 10 s).
    std::unique_lock<std::mutex> lock(mu_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      for (const auto& [sid, e] : sandboxes_)
        if (UsesDisk(e->rec, disk.id))
          return MakeError(Code::kFailedPrecondition, "disk " + disk.id + " is in use by sandbox " + sid);
      bool tearing_down = false;
      for (const auto& [sid, e] : deleting_)
        if (UsesDisk(e->rec, disk.id)) tearing_down = true;
      if (!tearing_down || settled_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
    }
  }
  return disks_->Delete(disk.id);
}

std::string SandboxManager::ShellFor(const SandboxView& v) const {
  for (const auto& l : LayerPaths(v.rec.layers_json)) {
    // Resolved inside the layer (a tenant's layer may hold symlinks that point anywhere).
    UniqueFd root(::open(l.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) continue;
    for (const char* p : {"usr/bin/bash", "bin/bash"}) {
      struct open_how how = {};
      how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
      how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
      UniqueFd f(static_cast<int>(::syscall(SYS_openat2, root.get(), p, &how, sizeof how)));
      struct stat st;
      if (f.valid() && ::fstat(f.get(), &st) == 0 && S_ISREG(st.st_mode)) return "/bin/bash";
    }
  }
  return "/bin/sh";
}

Result<SandboxView> SandboxManager::CreateForDiskCall(const std::string& disk_id, const std::string& image,
                                                      const std::string& from) {
  CreateRequest req;
  req.image = image;
  req.from = from;
  req.no_env = true;
  req.per_call = true;
  req.ttl_seconds = 600;
  req.disks = {{disk_id, "/mnt/disk"}};
  req.metadata = {{"serverless_disk", disk_id}};
  return Create(req);
}

Result<storage::SnapshotRecord> SandboxManager::Snapshot(const std::string& id, const std::string& name) {
  if (!ValidName(name)) return MakeError(Code::kInvalidArgument, "invalid snapshot name: names match [a-z0-9][a-z0-9._-]{0,62}");
  {
    auto existing = store_->GetSnapshot(name);
    if (!existing.ok()) return existing.error();
    if (existing->has_value()) return MakeError(Code::kAlreadyExists, "a snapshot named \"" + name + "\" exists");
  }
  std::string image, parent;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SBX_ASSIGN_OR_RETURN(auto e, Find(id));
    image = e->rec.image;
  }
  uint64_t bytes = 0;
  SBX_ASSIGN_OR_RETURN(auto chain, Capture(id, &bytes));
  ScopeExit unpin([&] {
    std::lock_guard<std::mutex> lock(mu_);
    pending_layers_.erase(pending_layers_.find(chain.front()));
  });
  storage::SnapshotRecord rec;
  rec.name = name;
  rec.layers_json = json(chain).dump();
  rec.image = image;
  rec.source = id;
  rec.size_bytes = static_cast<int64_t>(bytes);
  rec.created_ms = Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sandboxes_.find(id);
    if (it != sandboxes_.end()) rec.parent = it->second->rec.from_snapshot;
  }
  Status st = store_->InsertSnapshot(rec);
  FaultPoint("snapshot.recorded");
  if (!st.ok()) {
    // The name was taken meanwhile (or the write failed): the fresh layer goes.
    unpin.Release();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_layers_.erase(pending_layers_.find(chain.front()));
    }
    CollectLayers();
    if (st.error().code == Code::kAlreadyExists)
      return MakeError(Code::kAlreadyExists, "a snapshot named \"" + name + "\" exists");
    return st.error();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++snapshots_;
  }
  return rec;
}

Result<std::vector<SandboxView>> SandboxManager::Fork(const std::string& id, int count) {
  if (count < 1 || count > 64) return MakeError(Code::kInvalidArgument, "count must be between 1 and 64");
  CreateRequest req;
  std::string image;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SBX_ASSIGN_OR_RETURN(auto e, Find(id));
    const auto& r = e->rec;
    req.type = r.type;
    req.isolation = r.isolation;
    req.ttl_seconds = r.ttl_seconds;
    req.ttl_action = r.ttl_action;
    req.no_env = r.no_env;
    req.public_ports = r.public_ports;
    req.cpus = static_cast<int>(r.cpus);
    req.memory_mb = r.memory_mb;
    req.disk_mb = r.disk_mb;
    req.pids = static_cast<int>(r.pids);
    auto env = json::parse(r.env_json, nullptr, false);
    if (env.is_object())
      for (auto& [k, v] : env.items())
        if (v.is_string()) req.env[k] = v.get<std::string>();
    auto md = json::parse(r.metadata_json, nullptr, false);
    if (md.is_object())
      for (auto& [k, v] : md.items())
        if (v.is_string()) req.metadata[k] = v.get<std::string>();
    req.metadata["forked_from"] = id;
    req.from = r.from_snapshot;
    image = r.image;
  }
  SBX_ASSIGN_OR_RETURN(auto chain, Capture(id, nullptr));
  FaultPoint("fork.captured");
  auto unpin = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    pending_layers_.erase(pending_layers_.find(chain.front()));
  };
  std::vector<SandboxView> out;
  for (int i = 0; i < count; ++i) {
    auto v = CreateOn(req, image, chain, /*use_pool=*/false);
    if (!v.ok()) {
      for (const auto& made : out) (void)Delete(made.rec.id);
      unpin();
      CollectLayers();
      return v.error().Wrap("fork " + std::to_string(i + 1) + " of " + std::to_string(count));
    }
    out.push_back(*v);
  }
  unpin();
  {
    std::lock_guard<std::mutex> lock(mu_);
    forks_ += count;
  }
  return out;
}

Result<std::vector<storage::SnapshotRecord>> SandboxManager::ListSnapshots() { return store_->ListSnapshots(); }

Result<storage::SnapshotRecord> SandboxManager::GetSnapshot(const std::string& name) {
  if (!ValidName(name)) return MakeError(Code::kInvalidArgument, "invalid snapshot name");
  SBX_ASSIGN_OR_RETURN(auto rec, store_->GetSnapshot(name));
  if (!rec) return MakeError(Code::kNotFound, "snapshot \"" + name + "\" not found");
  return *rec;
}

Status SandboxManager::DeleteSnapshot(const std::string& name) {
  if (!ValidName(name)) return MakeError(Code::kInvalidArgument, "invalid snapshot name");
  auto snap = store_->GetSnapshot(name);
  SBX_ASSIGN_OR_RETURN(bool removed, store_->DeleteSnapshot(name));
  if (!removed) return MakeError(Code::kNotFound, "snapshot \"" + name + "\" not found");
  if (snap.ok() && snap->has_value()) {
    // Warm sandboxes of the snapshot (on any runtime, with or without disks) go.
    std::vector<std::string> layers = LayerPaths((*snap)->layers_json);
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> keys;
    for (const auto& [key, k] : wanted_)
      if (k.layers == layers) keys.push_back(key);
    for (const auto& key : keys) DropPool(key);
  }
  CollectLayers();
  return OkStatus();
}

void SandboxManager::CollectLayers() {
  std::lock_guard<std::mutex> gc(gc_mu_);
  // A capture in flight writes a temporary, then a fresh layer that no row names yet:
  // nothing is collected unless no capture ran at all from before this view of what is
  // used until the folder is listed (a capture started later makes only new names).
  auto quiet_since = [&](uint64_t starts) {
    if (capture_starts_ != starts) return false;
    for (const auto& [_, e] : sandboxes_)
      if (e->captures) return false;
    return true;
  };
  uint64_t starts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    starts = capture_starts_;
    if (!quiet_since(starts)) return;
  }
  std::set<std::string> used;
  auto add = [&](const std::string& layers_json) {
    for (auto& l : LayerPaths(layers_json)) used.insert(std::move(l));
  };
  auto rows = store_->ListSandboxes();
  auto snaps = store_->ListSnapshots();
  if (!rows.ok() || !snaps.ok()) return;  // never collect on a partial view
  for (const auto& r : *rows) add(r.layers_json);
  for (const auto& r : *snaps) add(r.layers_json);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [_, e] : sandboxes_) add(e->rec.layers_json);
    for (const auto& [_, e] : deleting_) add(e->rec.layers_json);
    for (const auto& [_, q] : pool_)
      for (const auto& e : q) add(e->rec.layers_json);
    for (const auto& l : pending_layers_) used.insert(l);
  }
  std::string base = opts_.data_dir + "/layers";
  auto dirs = fs::ListDir(base);
  if (!dirs.ok()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!quiet_since(starts)) return;
  }
  for (const auto& d : *dirs) {
    std::string path = base + "/" + d;
    // A layer's root is its folder, or a folder in it (Runtime::Captured::root).
    auto at = used.lower_bound(path);
    if (at != used.end() && (*at == path || at->rfind(path + "/", 0) == 0)) continue;
    SBX_LOG(kDebug) << "removing unused layer " << d;
    (void)runtimes_->layers()->RemoveLayer(path);
  }
}

Status SandboxManager::RunnableLocked(const std::string& id, const Entry& e) {
  if (e.rec.state == "paused" && !e.busy)
    return MakeError(Code::kFailedPrecondition,
                     "sandbox " + id + " is paused" +
                         (e.rec.auto_resume ? std::string("; try again") : std::string(" and its auto_resume is off; resume it first")));
  if (e.rec.state != "running" || e.busy)
    return MakeError(Code::kFailedPrecondition,
                     "sandbox " + id + " is " + (e.busy ? std::string("changing state") : e.rec.state) + ", not running");
  if (!Rt(e.rec).Alive(e.inst))
    return MakeError(Code::kUnavailable,
                     "sandbox " + id + " has stopped unexpectedly (its init exited); it will be marked error");
  return OkStatus();
}

std::vector<std::string> SandboxManager::ExecEnvLocked(const std::string& id, const Entry& e,
                                                      const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env = opts_.base_env;
    env["SBX_SANDBOX_ID"] = id;
    if (!opts_.secret_key.empty()) env["SBX_TOKEN"] = TokenFor(id);
    if (!e.rec.no_env) {
      std::lock_guard<std::mutex> slock(secrets_mu_);
      for (const auto& [k, v] : secrets_) env[k] = v;
    }
    auto senv = json::parse(e.rec.env_json, nullptr, false);
    if (senv.is_object())
      for (auto& [k, v] : senv.items())
        if (v.is_string()) env[k] = v.get<std::string>();
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
}

Status SandboxManager::CheckExecRequest(const ExecRequest& req) const {
  if (req.argv.empty() || req.argv[0].empty()) return MakeError(Code::kInvalidArgument, "cmd is empty");
  SBX_RETURN_IF_ERROR(ValidateEnv(req.env, "exec env"));
  for (const auto& a : req.argv)
    if (a.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, "cmd holds a NUL byte");
  if (req.cwd.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, "cwd holds a NUL byte");
  return OkStatus();
}

Result<PreparedProcess> SandboxManager::PrepareProcess(const std::string& id, const ExecRequest& req) {
  SBX_RETURN_IF_ERROR(CheckExecRequest(req));
  auto lease = LeaseAgent(id);
  if (!lease.ok()) return lease.error();
  PreparedProcess p;
  p.lease = *lease;
  std::lock_guard<std::mutex> lock(mu_);
  auto found = Find(id);
  if (!found.ok()) return found.error();
  p.req.env = ExecEnvLocked(id, **found, req.env);
  p.req.argv = req.argv;
  p.req.cwd = req.cwd.empty() ? opts_.default_cwd : req.cwd;
  p.req.timeout_ms = 0;  // runs until it ends or is signalled
  p.req.stdout_cap = p.req.stderr_cap = UINT64_MAX;  // the daemon's ring keeps the latest
  p.req.stdin_open = true;
  p.req.report_pid = true;
  p.req.tty = req.tty;
  p.req.cols = req.cols;
  p.req.rows = req.rows;
  p.req.keepalive_ms = opts_.keepalive_ms;
  ++execs_;
  return p;
}

Result<std::shared_ptr<AgentLease>> SandboxManager::LeaseAgent(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = Find(id);
  if (!found.ok()) return found.error();
  std::shared_ptr<Entry> e = *found;
  SBX_RETURN_IF_ERROR(RunnableLocked(id, *e));
  ++e->active_execs;
  e->last_active_ms = Now();
  return std::make_shared<AgentLease>(e->inst.agent, static_cast<uint64_t>(e->rec.disk_mb) << 20, [this, e] {
    std::lock_guard<std::mutex> lock(mu_);
    --e->active_execs;
    e->last_active_ms = Now();
  });
}

asio::awaitable<Result<ExecResult>> SandboxManager::Exec(asio::any_io_executor ex,
                                                         const std::string& id, ExecRequest req,
                                                         agent::OutputFn on_output) {
  if (auto st = CheckExecRequest(req); !st.ok()) co_return st.error();
  if (req.timeout_seconds < 1 || req.timeout_seconds > opts_.max_exec_timeout_seconds)
    co_return MakeError(Code::kInvalidArgument,
                        "timeout_seconds must be between 1 and " + std::to_string(opts_.max_exec_timeout_seconds));

  agent::ExecRequest areq;
  agent::DialerPtr addr;
  std::shared_ptr<Entry> e;
  double usd_per_hour = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = Find(id);
    if (!found.ok()) co_return found.error();
    e = *found;
    if (auto st = RunnableLocked(id, *e); !st.ok()) co_return st.error();
    areq.env = ExecEnvLocked(id, *e, req.env);
    areq.argv = req.argv;
    areq.cwd = req.cwd.empty() ? opts_.default_cwd : req.cwd;
    areq.timeout_ms = req.timeout_seconds * 1000;
    areq.stdout_cap = areq.stderr_cap = opts_.output_cap;
    areq.keepalive_ms = opts_.keepalive_ms;
    areq.stdin_open = req.stdin_data.has_value();
    addr = e->inst.agent;
    ++e->active_execs;
    ++execs_;
    e->last_active_ms = Now();
    auto t = types_.Find(e->rec.type);
    if (t.ok()) usd_per_hour = t->usd_per_hour;
  }
  FaultPoint("exec.started");
  // Arguments are named locals: g++ 12 may destroy a temporary made inside a co_await
  // expression twice.
  std::string stdin_data = req.stdin_data.value_or("");
  auto res = co_await agent::Exec(ex, addr, std::move(areq), std::move(stdin_data), on_output);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --e->active_execs;
    e->last_active_ms = Now();
  }
  if (!res.ok()) co_return res.error().Wrap("exec in " + id);
  ExecResult out;
  out.exit = *res;
  int64_t total_us = SteadyUs() - (req.arrival_us ? req.arrival_us : SteadyUs());
  out.execute_ms_exact = res->execute_us / 1000.0;
  out.queue_ms_exact = std::max<double>(0, (total_us - res->execute_us) / 1000.0);
  out.execute_ms = res->execute_us / 1000;
  out.queue_ms = static_cast<int64_t>(out.queue_ms_exact);
  out.cost_usd = CostUsd(res->execute_us / 1000, usd_per_hour);
  lat_.exec.ObserveMs(total_us / 1000.0);
  co_return out;
}

void SandboxManager::Tick() {
  std::vector<std::string> expired, idle;
  struct Died {
    std::string id;
    runtime::Instance inst;
    runtime::Runtime* rt;
  };
  std::vector<Died> died;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t now = Now();
    for (const auto& [id, e] : sandboxes_) {
      if (e->rec.state != "running" || e->busy) continue;
      if (!Rt(e->rec).Alive(e->inst)) {
        // Its init ended (killed from outside, or the whole sandbox was OOM-killed).
        CloseBilling(e->rec);
        e->rec.state = "error";
        e->rec.error = "the sandbox's init exited unexpectedly; start it to boot it again";
        e->rec.runtime_state.clear();
        died.push_back({id, e->inst, &Rt(e->rec)});
        e->inst = runtime::Instance();
        Status st = store_->UpdateSandbox(e->rec);
        if (!st.ok()) SBX_LOG(kError) << st.error().message;
        SBX_LOG(kWarn) << "sandbox " << id << ": " << e->rec.error;
        continue;
      }
      if (e->rec.expires_ms > 0 && e->rec.expires_ms <= now) {
        expired.push_back(id);
        continue;
      }
      if (e->rec.idle_timeout_seconds <= 0) continue;
      // Idle policy: an exec or a capture in flight is activity, and so is CPU use above
      // the threshold since the last sample (a build started in the background).
      if (e->active_execs > 0 || e->captures > 0) e->last_active_ms = now;
      uint64_t cpu = Rt(e->rec).CpuUsageNs(id, e->inst);
      if (e->cpu_sample_ms > 0 && now > e->cpu_sample_ms && cpu >= e->cpu_ns) {
        double share = static_cast<double>(cpu - e->cpu_ns) / (static_cast<double>(now - e->cpu_sample_ms) * 1e6);
        if (share > opts_.idle_cpu_threshold) e->last_active_ms = now;
      }
      if (now != e->cpu_sample_ms) {
        e->cpu_ns = cpu;
        e->cpu_sample_ms = now;
      }
      if (now - e->last_active_ms >= e->rec.idle_timeout_seconds * 1000) idle.push_back(id);
    }
  }
  // What the dead sandboxes left (other processes, cgroups) goes; their files stay.
  for (const auto& [id, inst, rt] : died) {
    Status st = rt->Stop(id, inst);
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
  for (const auto& id : expired) {
    std::unique_lock<std::mutex> lock(mu_);
    auto e = Find(id);
    if (!e.ok() || (*e)->rec.state != "running" || (*e)->busy || (*e)->captures) continue;
    if ((*e)->rec.ttl_action == "pause") {
      SBX_LOG(kInfo) << "sandbox " << id << " reached its TTL; pausing it";
      Status st = PauseLocked(lock, *e, "freeze");
      if (!st.ok()) SBX_LOG(kError) << st.error().message;
      continue;
    }
    SBX_LOG(kInfo) << "sandbox " << id << " reached its TTL; stopping it";
    Status st = StopLocked(lock, *e, "");
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
  for (const auto& id : idle) {
    std::unique_lock<std::mutex> lock(mu_);
    auto e = Find(id);
    if (!e.ok() || (*e)->rec.state != "running" || (*e)->busy || (*e)->captures || (*e)->active_execs) continue;
    SBX_LOG(kInfo) << "sandbox " << id << " was idle for " << (*e)->rec.idle_timeout_seconds << " s; pausing it";
    Status st = PauseLocked(lock, *e, "freeze");
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
}

Result<SandboxView> SandboxManager::Pause(const std::string& id, const std::string& mode) {
  if (mode != "freeze" && mode != "hibernate")
    return MakeError(Code::kInvalidArgument, "mode must be \"freeze\" or \"hibernate\"");
  int64_t t0 = SteadyUs();
  std::unique_lock<std::mutex> lock(mu_);
  SBX_ASSIGN_OR_RETURN(auto e, Find(id));
  if (mode == "hibernate" && !Rt(e->rec).Caps().hibernate)
    return MakeError(Code::kInvalidArgument,
                     "hibernate is not available on this sbxd: it needs CRIU (start sbxd with --criu PATH; "
                     "scripts/build-criu.sh builds it); use mode \"freeze\"");
  if (mode == "freeze" && !Rt(e->rec).Caps().freeze)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + "'s isolation cannot freeze it");
  if (e->rec.state == "paused" && !e->busy) {
    if (e->rec.pause_mode == mode) return ViewLocked(*e);
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is already paused with mode " +
                                                    e->rec.pause_mode + "; resume it first");
  }
  if (e->busy || e->captures)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state or being captured; try again");
  if (e->rec.state != "running")
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e->rec.state + ", not running");
  SBX_RETURN_IF_ERROR(PauseLocked(lock, e, mode));
  (mode == "hibernate" ? lat_.hibernate : lat_.pause).ObserveMs((SteadyUs() - t0) / 1000.0);
  return ViewLocked(*e);
}

std::string SandboxManager::CheckpointDir(const std::string& id) const {
  return opts_.data_dir + "/hibernated/" + id;
}

Status SandboxManager::PauseLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Entry>& e,
                                   const std::string& mode) {
  const std::string id = e->rec.id;
  const bool hibernate = mode == "hibernate";
  runtime::Runtime& rt = Rt(e->rec);
  if (hibernate && e->active_execs > 0 && !rt.Caps().hibernate_with_open_connections)
    // A connection from sbxd into the sandbox (an exec, a background process, a file or
    // port request) cannot be part of a checkpoint.
    return MakeError(Code::kFailedPrecondition,
                     "sandbox " + id + " has " + std::to_string(e->active_execs) +
                         " exec, file, port or background-process connections open; hibernate needs none "
                         "(wait for them, or pause with mode \"freeze\")");
  e->busy = true;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Instance inst = e->inst;
  lock.unlock();
  Status st = OkStatus();
  if (hibernate) {
    // Its memory goes to disk: only if it fits with the reserve still free.
    std::string parent = opts_.data_dir + "/hibernated";
    (void)fs::MkdirAll(parent, 0711);
    st = budget_.CheckWrite(parent, rt.CheckpointBytes(id));
    if (st.ok()) st = rt.Hibernate(spec, inst, CheckpointDir(id));
  } else {
    st = rt.Freeze(id);
  }
  FaultPoint("pause.done");
  lock.lock();
  e->busy = false;
  settled_cv_.notify_all();
  if (!st.ok()) return st.error().Wrap("pausing " + id);
  if (e->rec.state == "deleting") return MakeError(Code::kNotFound, "sandbox " + id + " was deleted");
  CloseBilling(e->rec);
  e->rec.state = "paused";
  e->rec.pause_mode = mode;
  e->rec.paused_ms = Now();
  if (hibernate) {
    // Its processes are gone (saved in CheckpointDir(id)); a resume restores them.
    e->inst = runtime::Instance();
    e->rec.runtime_state.clear();
  }
  ++pauses_;
  return store_->UpdateSandbox(e->rec);
}

Result<SandboxView> SandboxManager::Resume(const std::string& id) {
  int64_t t0 = SteadyUs();
  std::unique_lock<std::mutex> lock(mu_);
  SBX_ASSIGN_OR_RETURN(auto e, Find(id));
  if (e->rec.state == "running" && !e->busy) return ViewLocked(*e);
  if (e->busy || e->captures)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state or being captured; try again");
  if (e->rec.state != "paused")
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e->rec.state + ", not paused");
  const bool restore = e->rec.pause_mode == "hibernate";
  SBX_RETURN_IF_ERROR(ResumeLocked(lock, e));
  (restore ? lat_.restore : lat_.resume).ObserveMs((SteadyUs() - t0) / 1000.0);
  return ViewLocked(*e);
}

Status SandboxManager::ResumeLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Entry>& e) {
  const std::string id = e->rec.id;
  const bool hibernated = e->rec.pause_mode == "hibernate";
  // A hibernated sandbox takes its memory back.
  if (hibernated) SBX_RETURN_IF_ERROR(CheckQuotaLocked(1, e->rec.memory_mb, 0));
  e->busy = true;
  e->restoring = hibernated;
  runtime::StartSpec spec = SpecOf(e->rec);
  runtime::Runtime& rt = Rt(e->rec);
  lock.unlock();
  Status st = OkStatus();
  runtime::Instance restored;
  if (hibernated) {
    auto inst = rt.Restore(spec, CheckpointDir(id));
    if (inst.ok()) restored = *inst;
    else st = inst.error();
  } else {
    st = rt.Thaw(id);
  }
  lock.lock();
  e->busy = false;
  settled_cv_.notify_all();
  e->restoring = false;
  if (e->rec.state == "deleting") {
    if (hibernated && st.ok()) (void)rt.Stop(id, restored);
    return MakeError(Code::kNotFound, "sandbox " + id + " was deleted");
  }
  if (!st.ok()) return st.error().Wrap("resuming " + id);
  if (hibernated) {
    e->inst = restored;
    e->rec.runtime_state = restored.saved_state;
  }
  int64_t now = Now();
  // The TTL clock stood still while paused; a sandbox paused by its TTL gets a new one.
  if (e->rec.expires_ms > e->rec.paused_ms) e->rec.expires_ms += now - e->rec.paused_ms;
  else e->rec.expires_ms = now + e->rec.ttl_seconds * 1000;
  e->rec.state = "running";
  e->rec.pause_mode.clear();
  e->rec.paused_ms = 0;
  OpenBilling(e->rec);
  e->last_active_ms = now;
  e->cpu_sample_ms = 0;
  ++resumes_;
  SBX_RETURN_IF_ERROR(store_->UpdateSandbox(e->rec));
  // The checkpoint is spent once the record points at the restored processes.
  if (hibernated) (void)rt.DropCheckpoint(CheckpointDir(id));
  return OkStatus();
}

bool SandboxManager::PortsArePublic(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto e = Find(id);
  return e.ok() && (*e)->rec.public_ports;
}

bool SandboxManager::WantsResume(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto e = Find(id);
  return e.ok() && (*e)->rec.state == "paused" && (*e)->rec.auto_resume;
}

Result<SandboxView> SandboxManager::Update(const std::string& id, const UpdateRequest& req) {
  if (req.ttl_seconds && (*req.ttl_seconds < 1 || *req.ttl_seconds > opts_.max_ttl_seconds))
    return MakeError(Code::kInvalidArgument, "ttl_seconds must be between 1 and " + std::to_string(opts_.max_ttl_seconds));
  if (req.ttl_action && *req.ttl_action != "stop" && *req.ttl_action != "pause")
    return MakeError(Code::kInvalidArgument, "ttl_action must be \"stop\" or \"pause\"");
  if (req.idle_timeout_seconds && (*req.idle_timeout_seconds < 0 || *req.idle_timeout_seconds > opts_.max_ttl_seconds))
    return MakeError(Code::kInvalidArgument, "idle_timeout_seconds must be between 0 (off) and " +
                                                 std::to_string(opts_.max_ttl_seconds));
  std::lock_guard<std::mutex> lock(mu_);
  SBX_ASSIGN_OR_RETURN(auto e, Find(id));
  SandboxRecord r = e->rec;
  int64_t now = Now();
  if (req.ttl_seconds) {
    r.ttl_seconds = *req.ttl_seconds;
    // From now; for a paused sandbox, from the moment it was paused (its clock stands still).
    r.expires_ms = (r.state == "paused" ? r.paused_ms : now) + r.ttl_seconds * 1000;
  }
  if (req.ttl_action) r.ttl_action = *req.ttl_action;
  if (req.idle_timeout_seconds) r.idle_timeout_seconds = *req.idle_timeout_seconds;
  if (req.auto_resume) r.auto_resume = *req.auto_resume;
  if (req.public_ports) r.public_ports = *req.public_ports;
  SBX_RETURN_IF_ERROR(store_->UpdateSandbox(r));
  e->rec = r;
  e->last_active_ms = now;
  return ViewLocked(*e);
}

void SandboxManager::Touch(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(id);
  if (it != sandboxes_.end()) it->second->last_active_ms = Now();
}

Result<UsageReport> SandboxManager::Usage(int64_t from_ms, int64_t to_ms) {
  if (to_ms <= from_ms) return MakeError(Code::kInvalidArgument, "\"to\" must be after \"from\"");
  SBX_ASSIGN_OR_RETURN(auto periods, store_->PeriodsBetween(from_ms, to_ms));
  SBX_ASSIGN_OR_RETURN(auto calls, store_->CallsBetween(from_ms, to_ms));
  int64_t now = Now();
  UsageReport u;
  u.from_ms = from_ms;
  u.to_ms = to_ms;
  std::map<std::string, size_t> index;
  for (const auto& p : periods) {
    int64_t a = std::max(p.start_ms, from_ms);
    int64_t b = std::min(p.end_ms ? p.end_ms : std::max(now, p.start_ms), to_ms);
    if (b < a) continue;
    int64_t ms = b - a;
    double usd = CostUsd(ms, p.usd_per_hour);
    auto [it, fresh] = index.emplace(p.sandbox_id, u.sandboxes.size());
    if (fresh) u.sandboxes.push_back({p.sandbox_id, p.name, p.type, 0, 0});
    auto& line = u.sandboxes[it->second];
    line.seconds += ms / 1000.0;
    line.cost_usd += usd;
    auto& t = u.by_type[p.type];
    t.first += ms / 1000.0;
    t.second += usd;
    u.seconds += ms / 1000.0;
    u.compute_usd += usd;
  }
  for (const auto& c : calls) {
    ++u.calls;
    u.calls_usd += c.usd;
  }
  u.total_usd = u.compute_usd + u.calls_usd;
  return u;
}

namespace {
bool ValidEnvName(const std::string& n) {
  if (n.empty() || n.size() > 128 || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return n.rfind("SBX_", 0) != 0;
}
}  // namespace

Status SandboxManager::SetSecret(const std::string& name, const std::string& value) {
  if (opts_.secret_key.empty()) return MakeError(Code::kFailedPrecondition, "secrets are off on this sbxd");
  if (!ValidEnvName(name))
    return MakeError(Code::kInvalidArgument,
                     "invalid secret name: an environment name [A-Za-z_][A-Za-z0-9_]{0,127}, not starting with SBX_");
  if (value.size() > 65536) return MakeError(Code::kInvalidArgument, "a secret's value is at most 65536 bytes");
  if (value.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, "a secret's value holds a NUL byte");
  SBX_ASSIGN_OR_RETURN(std::string sealed, Seal(opts_.secret_key, value));
  std::lock_guard<std::mutex> lock(secrets_mu_);
  SBX_RETURN_IF_ERROR(store_->PutSecret(name, sealed, Now()));
  secrets_[name] = value;
  return OkStatus();
}

Result<std::vector<std::pair<std::string, int64_t>>> SandboxManager::ListSecrets() {
  SBX_ASSIGN_OR_RETURN(auto rows, store_->ListSecrets());
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& r : rows) out.emplace_back(r.name, r.updated_ms);
  return out;
}

Status SandboxManager::DeleteSecret(const std::string& name) {
  if (!ValidEnvName(name)) return MakeError(Code::kInvalidArgument, "invalid secret name");
  std::lock_guard<std::mutex> lock(secrets_mu_);
  SBX_ASSIGN_OR_RETURN(bool gone, store_->DeleteSecret(name));
  if (!gone) return MakeError(Code::kNotFound, "secret " + name + " not found");
  secrets_.erase(name);
  return OkStatus();
}

Status SandboxManager::LoadSecrets() {
  if (opts_.secret_key.empty()) return OkStatus();
  SBX_ASSIGN_OR_RETURN(auto rows, store_->ListSecrets());
  std::lock_guard<std::mutex> lock(secrets_mu_);
  for (const auto& r : rows) {
    auto v = Unseal(opts_.secret_key, r.sealed);
    if (!v.ok()) return v.error().Wrap("secret " + r.name);
    secrets_[r.name] = *v;
  }
  return OkStatus();
}

std::string SandboxManager::TokenFor(const std::string& id) const {
  if (opts_.secret_key.empty()) return "";
  return "sbt_" + id + "_" + HmacSha256Hex(opts_.secret_key, "sandbox-token:" + id).substr(0, 48);
}

std::optional<std::string> SandboxManager::SandboxOfToken(const std::string& token) {
  if (opts_.secret_key.empty() || token.rfind("sbt_", 0) != 0) return std::nullopt;
  auto sep = token.rfind('_');
  if (sep <= 4) return std::nullopt;
  std::string id = token.substr(4, sep - 4);
  if (!ValidName(id)) return std::nullopt;
  std::string want = TokenFor(id);
  if (want.size() != token.size()) return std::nullopt;
  unsigned char diff = 0;  // constant time
  for (size_t i = 0; i < want.size(); ++i) diff |= want[i] ^ token[i];
  if (diff) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (!sandboxes_.count(id)) return std::nullopt;  // deleted: its token is dead
  return id;
}

Status SandboxManager::RecordCall(const std::string& disk_id, const std::string& sandbox_id) {
  return store_->InsertCall({disk_id, sandbox_id, Now(), opts_.serverless_call_usd});
}

SandboxManager::Counts SandboxManager::GetCounts() {
  Counts c;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [_, e] : sandboxes_) {
    const std::string& s = e->rec.state;
    ++c.by_state[{s, e->rec.isolation}];
    if (s == "running") ++c.running;
    else if (s == "paused") ++c.paused;
    else if (s == "stopped") ++c.stopped;
    else if (s == "error") ++c.error;
    else if (s == "creating") ++c.creating;
  }
  {
    std::lock_guard<std::mutex> tl(tq_mu_);
    c.deleting = static_cast<int>(teardown_queue_.size()) + teardown_active_;
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
  return c;
}

}  // namespace sbx::core
