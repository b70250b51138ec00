// Create: a request checked, its record made and persisted, its sandbox started (or a
// warm one claimed from the pool, warm_pool.cc).
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/fault.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/run_blocking.h"
#include "base/scope_exit.h"
#include "core/layer_files.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

namespace asio = boost::asio;

using nlohmann::json;
using storage::SandboxRecord;

namespace {

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

// Who a new sandbox's calls run as when they name no one (docs/API.md, Users): the one
// asked for; root with disks (their calls and file routes run as root, who owns them);
// a template's source's user (whose files it holds; "" from before users: root) while
// its passwd still has that user; else the files' default.
Result<std::string> CreateUser(const CreateRequest& req, const std::vector<std::string>& layers,
                               const std::optional<std::string>& template_user) {
  if (!req.user.empty()) return SandboxUser(layers, req.user);
  if (!req.disks.empty()) return std::string("root");
  if (template_user) {
    auto kept = SandboxUser(layers, template_user->empty() ? "root" : *template_user);
    if (kept.ok()) return kept;
  }
  return SandboxUser(layers, "");
}

}  // namespace

Status ValidateEnv(const std::map<std::string, std::string>& env, const char* what) {
  for (const auto& [k, v] : env) {
    if (k.empty() || k.size() > 1024 || k.find('=') != std::string::npos ||
        k.find('\0') != std::string::npos || v.find('\0') != std::string::npos)
      return MakeError(Code::kInvalidArgument, std::string("invalid ") + what + " variable name \"" + k + "\"");
  }
  return OkStatus();
}

Status SandboxManager::ValidateCreate(const CreateRequest& req) const {
  if (auto t = types_.Find(req.type); !t.ok()) return t.error();
  if (!runtimes_->Find(req.isolation))
    return MakeError(Code::kInvalidArgument,
                     req.isolation == "gvisor" || req.isolation == "microvm"
                         ? "isolation \"" + req.isolation + "\" is not available on this sbxd (its log says why)"
                         : "unknown isolation \"" + req.isolation + "\" (container, gvisor, microvm)");
  if (!req.name.empty() && !ValidName(req.name))
    return MakeError(Code::kInvalidArgument, "invalid name: names match [a-z0-9][a-z0-9._-]{0,62}");
  int64_t ttl = req.ttl_seconds.value_or(opts_.default_ttl_seconds);
  if (ttl < 1 || ttl > opts_.max_ttl_seconds)
    return MakeError(Code::kInvalidArgument, "ttl_seconds must be between 1 and " + std::to_string(opts_.max_ttl_seconds));
  if (req.ttl_action != "stop" && req.ttl_action != "pause" && req.ttl_action != "delete")
    return MakeError(Code::kInvalidArgument, "ttl_action must be \"stop\", \"pause\" or \"delete\"");
  if (req.idle_timeout_seconds < 0 || req.idle_timeout_seconds > opts_.max_ttl_seconds)
    return MakeError(Code::kInvalidArgument, "idle_timeout_seconds must be between 0 (off) and " +
                                                 std::to_string(opts_.max_ttl_seconds));
  if (auto rules = ValidateNetwork(req.network); !rules.ok()) return rules.error();
  SBX_RETURN_IF_ERROR(ValidateEnv(req.env, "env"));
  if (!req.disks.empty()) {
    if (!disks_) return MakeError(Code::kInvalidArgument, "disks are not available on this sbxd");
    if (req.disks.size() > 8) return MakeError(Code::kInvalidArgument, "at most 8 disks per sandbox");
    std::set<std::string> paths;
    for (const auto& [id, path] : req.disks) {
      if (auto d = disks_->Get(id); !d.ok()) return d.error();
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
  if (req.disk_mb) SBX_RETURN_IF_ERROR(admission_.CheckDiskRequest(*req.disk_mb));
  if (req.pids && (*req.pids < 16 || *req.pids > 1 << 22))
    return MakeError(Code::kInvalidArgument, "resources.pids must be between 16 and 4194304");
  if (!req.from.empty()) {
    if (!ValidName(req.from)) return MakeError(Code::kInvalidArgument, "invalid snapshot name");
    if (!req.image.empty()) return MakeError(Code::kInvalidArgument, "give either image or from, not both");
  }
  return OkStatus();
}

Result<SandboxView> SandboxManager::Create(const CreateRequest& req) {
  const int64_t t0 = SteadyUs();
  auto v = CreateNow(req);
  if (v.ok()) lat_.create.ObserveMs((SteadyUs() - t0) / 1000.0);
  return v;
}

asio::awaitable<Result<SandboxView>> SandboxManager::CreateCall(CreateRequest req) {
  const int max = opts_.max_creates_in_flight;
  if (max > 0 && creates_in_flight_.fetch_add(1) >= max) {
    --creates_in_flight_;
    Error busy = MakeError(Code::kResourceExhausted, std::to_string(max) +
                                                         " creates are under way (sbxd's --max-creates-in-flight); "
                                                         "try again in a moment");
    busy.retry_after_s = 1;
    co_return busy;
  }
  ScopeExit done([&] {
    if (max > 0) --creates_in_flight_;
  });
  std::function<Result<SandboxView>()> fn = [this, &req] { return Create(req); };
  co_return co_await RunBlocking(&blocking_, &fn);
}

Result<SandboxView> SandboxManager::CreateNow(const CreateRequest& asked) {
  CreateRequest req = asked;
  if (req.isolation.empty()) req.isolation = opts_.default_isolation;
  SBX_RETURN_IF_ERROR(ValidateCreate(req));
  if (!req.from.empty()) {
    SBX_ASSIGN_OR_RETURN(auto snap, GetSnapshot(req.from));
    if (snap.memory_secrets && req.no_env)
      return MakeError(Code::kFailedPrecondition,
                       "snapshot " + req.from + " holds the memory of a sandbox whose execs got the daemon's secrets: a "
                       "no_env sandbox cannot start from it (make the template from a no_env sandbox, or leave no_env out)");
    std::vector<std::string> layers = LayerPaths(snap.layers_json);
    if (layers.empty()) return MakeError(Code::kInternal, "snapshot " + req.from + " has no layers");
    CreateRequest r = req;
    SBX_ASSIGN_OR_RETURN(r.user, CreateUser(req, layers, snap.user));
    return CreateOn(r, snap.image, layers);
  }
  std::string image_name = req.image.empty() ? opts_.default_image : req.image;
  if (!ValidName(image_name)) return MakeError(Code::kInvalidArgument, "invalid image name");
  SBX_ASSIGN_OR_RETURN(auto image, images_->Get(image_name));
  CreateRequest r = req;
  SBX_ASSIGN_OR_RETURN(r.user, CreateUser(req, {image.path}, std::nullopt));
  return CreateOn(r, image_name, {image.path});
}

SandboxRecord SandboxManager::MakeRecord(const CreateRequest& req, const SandboxType& type,
                                         const std::string& image_name, const std::vector<std::string>& layers) {
  SandboxRecord r;
  r.id = NewId("sb");
  r.name = req.name;
  r.state = StateName(State::kCreating);
  r.type = type.name;
  r.isolation = req.isolation;
  r.image = image_name;
  r.from_snapshot = req.from;
  r.layers_json = json(layers).dump();
  r.cpus = req.cpus.value_or(type.cpus);
  r.memory_mb = req.memory_mb.value_or(type.memory_mb);
  r.disk_mb = admission_.DiskMbFor(req, type);
  r.pids = req.pids.value_or(type.pids);
  r.ttl_seconds = req.ttl_seconds.value_or(opts_.default_ttl_seconds);
  r.ttl_action = req.ttl_action;
  r.idle_timeout_seconds = req.idle_timeout_seconds;
  r.auto_resume = req.auto_resume;
  r.public_ports = req.public_ports;
  r.no_new_privs = req.no_new_privs;
  // Resolved by Create (a fork's is its source's); a pooled sandbox gets its claim's.
  r.user = req.user.empty() ? "root" : req.user;
  r.billing = req.per_call ? "call" : "time";
  r.no_env = req.no_env;
  r.env_json = json(req.env).dump();
  r.metadata_json = json(req.metadata).dump();
  auto rules = net::Rules::FromJson(req.network, opts_.default_network);  // validated
  r.network_json = (rules.ok() ? rules->ToJson() : json{{"mode", "none"}}).dump();
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
  SBX_RETURN_IF_ERROR(admission_.CheckDataDirSpace());
  {
    Lock lock(table_.mu);
    SBX_RETURN_IF_ERROR(admission_.CheckQuota(table_, 1, req.memory_mb.value_or(type.memory_mb), admission_.DiskMbFor(req, type)));
  }
  // Warm sandboxes are made with no_new_privs: a create without it boots its own.
  if (use_pool && opts_.pool_size > 0 && req.no_new_privs && PoolFits(req, type)) {
    if (EntryPtr pooled = TakeFromPool(req, image_name, layers)) {
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
  // Its rules are in the firewall before its link exists.
  SBX_RETURN_IF_ERROR(PrepareNetwork(&r));
  {
    Lock lock(table_.mu);
    auto refused = [&](Error err) {
      ReleaseNetwork(r);
      return err;
    };
    if (Status free = table_.CheckNameFree(r.name); !free.ok()) return refused(free.error());
    if (Status q = admission_.CheckQuota(table_, 1, r.memory_mb, r.disk_mb); !q.ok()) return refused(q.error());
    // The row comes first: a crash from here on leaves a row that Recover() resolves.
    auto st = store_->InsertSandbox(r);
    if (!st.ok()) {
      if (st.error().code == Code::kAlreadyExists)
        return refused(MakeError(Code::kAlreadyExists, "a sandbox named \"" + r.name + "\" exists"));
      return refused(st.error());
    }
    table_.Add(e);
  }
  FaultPoint("create.row_inserted");

  runtime::StartSpec spec = SpecOf(r);
  runtime::Runtime& rt = Rt(r);
  Status prepared = rt.Prepare(spec);
  Result<runtime::Instance> inst = prepared.ok() ? rt.Start(spec) : Result<runtime::Instance>(prepared.error());

  FaultPoint("create.started");
  Lock lock(table_.mu);
  e->busy = false;
  table_.NotifySettled();
  bool deleted = table_.Get(r.id) == nullptr;
  if (!inst.ok()) {
    // Nothing of a failed create stays: no row, no files, no cgroup.
    table_.Remove(r.id);
    table_.mu.Unlock();
    (void)rt.Destroy(r.id, spec.dir);
    ReleaseNetwork(r);
    (void)store_->DeleteSandbox(r.id);
    table_.mu.Lock();
    return OnDataDir(inst.error());
  }
  e->inst = *inst;
  if (deleted) {
    // Deleted while it was being created: the queued teardown finishes it.
    return MakeError(Code::kNotFound, "sandbox " + r.id + " was deleted while it was created");
  }
  e->set_state(State::kRunning);
  r.runtime_state = inst->saved_state;
  metering_.Open(r);
  r.expires_ms = r.started_ms + r.ttl_seconds * 1000;
  e->last_active_ms = r.started_ms;
  Status st = table_.Persist(*e);
  if (!st.ok()) SBX_LOG(kError) << "persisting sandbox " << r.id << ": " << st.error().message;
  ++creates_;
  SandboxView view = View(*e);
  FollowLoadedProcesses(*inst, std::string(r.id));
  return view;
}

}  // namespace sbx::core
