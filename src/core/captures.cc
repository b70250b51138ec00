// Captures: a sandbox's files taken as a new layer over its own (frozen only for the
// copy), kept as a named snapshot or started as forks; and the collection of layers that
// no sandbox and no snapshot uses any more.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/fault.h"
#include "base/fs.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/scope_exit.h"
#include "core/processes.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

using nlohmann::json;

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

Result<std::vector<std::string>> SandboxManager::Capture(const std::string& id, uint64_t* bytes, bool memory) {
  // sbxd's connections to the processes that the agent keeps close for a save that cannot
  // hold them, and open again after it (or at once if it is refused), as around a hibernate.
  bool detach = false;
  if (memory && processes_) {
    Lock lock(table_.mu);
    auto found = table_.Find(id);
    if (found.ok()) {
      const runtime::Capabilities caps = Rt((*found)->rec).Caps();
      detach = (*found)->is(State::kRunning) && !(*found)->busy && caps.memory_snapshots &&
               !caps.hibernate_with_open_connections;
    }
  }
  if (detach) processes_->Detach(id);
  ScopeExit reattach([&] {
    if (detach) processes_->Reattach(id, true);
  });
  EntryPtr e;
  bool running;
  std::vector<std::string> layers;
  runtime::Runtime* rt;
  runtime::StartSpec spec;
  runtime::Instance inst;
  {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(e, table_.Find(id));
    rt = &Rt(e->rec);
    if (e->busy) return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state; try again");
    if (!e->is(State::kRunning) && !e->is(State::kStopped) && !e->is(State::kPaused))
      return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e->rec.state);
    if (memory && !rt->Caps().memory_snapshots) {
      std::string have;
      for (const auto& w : GetFeatures().memory_isolation) have += (have.empty() ? "" : ", ") + w;
      return MakeError(Code::kFailedPrecondition,
                       "a capture with memory (a snapshot or fork) is not available for sandboxes of isolation " +
                           rt->Kind() + " on this sbxd (" + (have.empty() ? "no wall here has it" : "walls with it: " + have) +
                           (rt->Kind() == "container" ? "; the container wall needs CRIU that checkpoints on this kernel" : "") +
                           "); leave memory out");
    }
    if (memory && !e->is(State::kRunning))
      return MakeError(Code::kFailedPrecondition, "a capture with memory needs a running sandbox; sandbox " + id +
                                                      " is " + e->rec.state + (e->is(State::kPaused) ? ": resume it first" : ""));
    if (memory && e->active_execs > 0 && !rt->Caps().hibernate_with_open_connections)
      // As for a hibernate: the save cannot hold sbxd's end of a connection into the sandbox.
      return MakeError(Code::kFailedPrecondition,
                       "sandbox " + id + " has " + std::to_string(e->active_execs) +
                           " exec, file or port connections open; a capture with memory on isolation " + rt->Kind() +
                           " needs none (wait for them, or leave memory out)");
    if (memory) {
      spec = SpecOf(e->rec);
      inst = e->inst;
    }
    // A paused sandbox's processes already hold still: no freeze (and no thaw after).
    running = e->is(State::kRunning);
    ++e->captures;
    ++capture_starts_;
    layers = LayerPaths(e->rec.layers_json);
  }
  ScopeExit release([&] {
    {
      Lock lock(table_.mu);
      --e->captures;
    }
    table_.NotifySettled();
  });
  SBX_RETURN_IF_ERROR(admission_.CheckDataDirSpace());
  std::string base = opts_.data_dir + "/layers";
  SBX_RETURN_IF_ERROR(fs::MkdirAll(base, 0711));
  // Copied under a temporary name, renamed when whole: a crash leaves no half layer
  // under a real name (and the collector removes temporaries).
  std::string tmp = base + "/tmp-" + RandomHex(8);
  Result<runtime::Runtime::Captured> captured = MakeError(Code::kInternal, "not captured");
  {
    // A memory capture holds the sandbox still itself (its memory and files must match).
    if (running && !memory) SBX_RETURN_IF_ERROR(rt->Freeze(id));
    ScopeExit thaw([&] {
      if (running && !memory) {
        Status st = rt->Thaw(id);
        if (!st.ok()) SBX_LOG(kError) << "thawing " << id << ": " << st.error().message;
      }
    });
    FaultPoint("snapshot.frozen");
    captured = memory ? rt->CaptureMemory(spec, inst, tmp) : rt->CaptureFiles(DirOf(id), tmp);
    FaultPoint("snapshot.copied");
  }
  if (!captured.ok()) {
    (void)rt->RemoveLayer(tmp);
    return OnDataDir(captured.error().Wrap("capturing " + id));
  }
  if (memory) {
    // The saved memory holds this sandbox's token (its processes' environments, its
    // /run/sbx.env): a new generation kills that token everywhere, in every copy of the
    // capture too. The sandbox's own file is renewed now; its next commands get the new one.
    Status bumped = OkStatus();
    {
      Lock lock(table_.mu);
      ++e->rec.token_gen;
      bumped = table_.Persist(*e);
      if (!bumped.ok()) --e->rec.token_gen;
    }
    if (!bumped.ok()) {
      (void)rt->RemoveLayer(tmp);
      return bumped.error().Wrap("capturing " + id);
    }
    RenewSelfEnv(id);
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
    Lock lock(table_.mu);
    pending_layers_.insert(layer);
  }
  FaultPoint("snapshot.renamed");
  if (bytes) *bytes = size;
  layers.insert(layers.begin(), layer);
  return layers;
}

void SandboxManager::Unpin(const std::string& layer) {
  Lock lock(table_.mu);
  auto it = pending_layers_.find(layer);
  if (it != pending_layers_.end()) pending_layers_.erase(it);
}

Result<storage::SnapshotRecord> SandboxManager::Snapshot(const std::string& id, const std::string& name, bool memory) {
  if (!ValidName(name))
    return MakeError(Code::kInvalidArgument, "invalid snapshot name: names match [a-z0-9][a-z0-9._-]{0,62}");
  // The sandbox first: a 404 for a mistyped one says more than a name taken.
  std::string image, kind;
  {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
    image = e->rec.image;
    kind = Rt(e->rec).Kind();
  }
  {
    auto existing = store_->GetSnapshot(name);
    if (!existing.ok()) return existing.error();
    if (existing->has_value()) return MakeError(Code::kAlreadyExists, "a snapshot named \"" + name + "\" exists");
  }
  uint64_t bytes = 0;
  SBX_ASSIGN_OR_RETURN(auto chain, Capture(id, &bytes, memory));
  ScopeExit unpin([&] { Unpin(chain.front()); });
  storage::SnapshotRecord rec;
  rec.name = name;
  rec.layers_json = json(chain).dump();
  rec.image = image;
  rec.source = id;
  rec.size_bytes = static_cast<int64_t>(bytes);
  rec.created_ms = Now();
  if (memory) rec.memory = kind;
  {
    Lock lock(table_.mu);
    if (auto e = table_.Get(id)) {
      rec.parent = e->rec.from_snapshot;
      rec.user = e->rec.user.empty() ? "root" : e->rec.user;  // its state is that user's
      // Its processes may hold the secrets its execs got (from the secrets set now; one
      // deleted before the capture is not counted).
      rec.memory_secrets = memory && !e->rec.no_env && secrets_.Any();
    }
  }
  Status st = store_->InsertSnapshot(rec);
  FaultPoint("snapshot.recorded");
  if (!st.ok()) {
    // The name was taken meanwhile (or the write failed): the fresh layer goes.
    unpin.Release();
    Unpin(chain.front());
    CollectLayers();
    if (st.error().code == Code::kAlreadyExists)
      return MakeError(Code::kAlreadyExists, "a snapshot named \"" + name + "\" exists");
    return st.error();
  }
  Lock lock(table_.mu);
  ++snapshots_;
  return rec;
}

Result<std::vector<SandboxView>> SandboxManager::Fork(const std::string& id, int count, bool memory) {
  if (count < 1 || count > 64) return MakeError(Code::kInvalidArgument, "count must be between 1 and 64");
  CreateRequest req;
  std::string image;
  {
    Lock lock(table_.mu);
    SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
    const auto& r = e->rec;
    req.type = r.type;
    req.isolation = r.isolation;
    req.ttl_seconds = r.ttl_seconds;
    req.ttl_action = r.ttl_action;
    req.no_env = r.no_env;
    req.public_ports = r.public_ports;
    req.no_new_privs = r.no_new_privs;
    req.user = r.user.empty() ? "root" : r.user;
    // Its source's rules, with a link (and address) of its own.
    auto net = json::parse(r.network_json, nullptr, false);
    if (net.is_object())
      for (const char* k : {"mode", "allow", "deny"})
        if (net.contains(k)) req.network[k] = net[k];
    req.cpus = static_cast<int>(r.cpus);
    req.memory_mb = r.memory_mb;
    req.disk_mb = r.disk_mb;
    req.pids = static_cast<int>(r.pids);
    auto strings_of = [](const std::string& text, std::map<std::string, std::string>& to) {
      auto obj = json::parse(text, nullptr, false);
      if (obj.is_object())
        for (auto& [k, v] : obj.items())
          if (v.is_string()) to[k] = v.get<std::string>();
    };
    strings_of(r.env_json, req.env);
    strings_of(r.metadata_json, req.metadata);
    req.metadata["forked_from"] = id;
    req.from = r.from_snapshot;
    image = r.image;
  }
  SBX_ASSIGN_OR_RETURN(auto chain, Capture(id, nullptr, memory));
  FaultPoint("fork.captured");
  std::vector<SandboxView> out;
  for (int i = 0; i < count; ++i) {
    auto v = CreateOn(req, image, chain, /*use_pool=*/false);
    if (!v.ok()) {
      for (const auto& made : out) (void)Delete(made.rec.id);
      Unpin(chain.front());
      CollectLayers();
      return v.error().Wrap("fork " + std::to_string(i + 1) + " of " + std::to_string(count));
    }
    out.push_back(*v);
  }
  Unpin(chain.front());
  Lock lock(table_.mu);
  forks_ += count;
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
    DropPoolIf([&](const PoolKey& k) { return k.layers == layers; });
  }
  CollectLayers();
  return OkStatus();
}

Status SandboxManager::DeleteImage(const std::string& name) {
  if (!ValidName(name)) return MakeError(Code::kInvalidArgument, "invalid image name");
  SBX_ASSIGN_OR_RETURN(auto img, store_->GetImage(name));
  if (!img) return MakeError(Code::kNotFound, "image \"" + name + "\" not found");
  auto uses = [&](const std::string& layers_json) {
    auto l = LayerPaths(layers_json);
    return std::find(l.begin(), l.end(), img->path) != l.end();
  };
  SBX_ASSIGN_OR_RETURN(auto rows, store_->ListSandboxes());
  SBX_ASSIGN_OR_RETURN(auto snaps, store_->ListSnapshots());
  std::vector<std::string> users;
  for (const auto& r : rows)
    if (ParseState(r.state) != State::kPooled && ParseState(r.state) != State::kDeleting && uses(r.layers_json))
      users.push_back("sandbox " + r.id);  // (sandboxes being deleted are waited for below)
  for (const auto& r : snaps)
    if (uses(r.layers_json)) users.push_back("snapshot " + r.name);
  if (!users.empty()) {
    std::string shown;
    for (size_t i = 0; i < users.size() && i < 5; ++i) shown += (i ? ", " : "") + users[i];
    return MakeError(Code::kFailedPrecondition, "image \"" + name + "\" is in use by " + shown +
                                                    (users.size() > 5 ? ", ..." : "") +
                                                    "; delete those first (a snapshot keeps its image)");
  }
  SBX_RETURN_IF_ERROR(store_->DeleteImage(name));
  DropPoolIf([&](const PoolKey& k) { return std::find(k.layers.begin(), k.layers.end(), img->path) != k.layers.end(); });
  // Its folder goes once the teardowns that still hold it (its spares, sandboxes deleted just
  // before) have finished, waited for at most 10 s; it stays if something took it up
  // meanwhile (a create that read the image just before: that create then fails, no
  // existing sandbox is touched). Whatever stays, sbxd's next start collects.
  bool used = false;
  {
    Lock lock(table_.mu);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      used = false;
      bool tearing_down = false;
      for (const auto& [_, e] : table_.live()) used = used || uses(e->rec.layers_json);
      for (const auto& [_, e] : table_.deleting()) tearing_down = tearing_down || uses(e->rec.layers_json);
      if (used || !tearing_down) break;
      if (!table_.WaitSettled(lock, deadline)) {
        used = true;
        break;
      }
    }
  }
  if (!used) {
    for (const auto& [_, rt] : runtimes_->all()) rt->ForgetLayer(img->path);
    std::string dir = img->path.substr(0, img->path.rfind('/'));
    if (Status st = fs::RemoveTree(dir); !st.ok()) SBX_LOG(kWarn) << "removing image folder " << dir << ": " << st.error().message;
  }
  return OkStatus();
}

void SandboxManager::CollectLayers() {
  Lock gc(gc_mu_);
  // A capture in flight writes a temporary, then a fresh layer that no row names yet:
  // nothing is collected unless no capture ran at all from before this view of what is
  // used until the folder is listed (a capture started later makes only new names).
  auto quiet_since = [&](uint64_t starts) SBX_REQUIRES(table_.mu) {
    if (capture_starts_ != starts) return false;
    for (const auto& [_, e] : table_.live())
      if (e->captures) return false;
    return true;
  };
  uint64_t starts;
  {
    Lock lock(table_.mu);
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
    Lock lock(table_.mu);
    for (const auto& [_, e] : table_.live()) add(e->rec.layers_json);
    for (const auto& [_, e] : table_.deleting()) add(e->rec.layers_json);
    for (const auto& [_, q] : pool_)
      for (const auto& e : q) add(e->rec.layers_json);
    for (const auto& l : pending_layers_) used.insert(l);
  }
  std::string base = opts_.data_dir + "/layers";
  auto dirs = fs::ListDir(base);
  if (!dirs.ok()) return;
  {
    Lock lock(table_.mu);
    if (!quiet_since(starts)) return;
  }
  for (const auto& d : *dirs) {
    std::string path = base + "/" + d;
    // A layer's root is its folder, or a folder in it (Runtime::Captured::root).
    auto at = used.lower_bound(path);
    if (at != used.end() && (*at == path || at->rfind(path + "/", 0) == 0)) continue;
    SBX_LOG(kDebug) << "removing unused layer " << d;
    for (const auto& [_, rt] : runtimes_->all()) rt->ForgetLayer(path);
    (void)runtimes_->layers()->RemoveLayer(path);
  }
}

}  // namespace sbx::core
