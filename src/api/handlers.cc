#include "api/handlers.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "api/decode.h"
#include "api/errors.h"
#include "api/exec_answer.h"
#include "api/handler_util.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/fault.h"
#include "base/proc.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

const std::vector<RouteInfo> kRoutes = {
    {"GET", "/v1/health", false},
    {"GET", "/v1/openapi.json", false},
    {"GET", "/metrics", false},
    {"POST", "/v1/sandboxes", false},
    {"GET", "/v1/sandboxes", false},
    {"GET", "/v1/sandboxes/{id}", false},
    {"DELETE", "/v1/sandboxes/{id}", false},
    {"PATCH", "/v1/sandboxes/{id}", false},
    {"POST", "/v1/sandboxes/{id}/exec", false},
    {"POST", "/v1/sandboxes/{id}/stop", false},
    {"POST", "/v1/sandboxes/{id}/start", false},
    {"POST", "/v1/sandboxes/{id}/pause", false},
    {"POST", "/v1/sandboxes/{id}/resume", false},
    {"POST", "/v1/sandboxes/{id}/timeout", false},
    {"POST", "/v1/sandboxes/{id}/snapshot", false},
    {"POST", "/v1/sandboxes/{id}/fork", false},
    {"GET", "/v1/sandboxes/{id}/files", false},
    {"PUT", "/v1/sandboxes/{id}/files", true},
    {"DELETE", "/v1/sandboxes/{id}/files", false},
    {"GET", "/v1/sandboxes/{id}/files/list", false},
    {"GET", "/v1/sandboxes/{id}/files/stat", false},
    {"POST", "/v1/sandboxes/{id}/files/mkdir", false},
    {"POST", "/v1/sandboxes/{id}/files/move", false},
    {"GET", "/v1/sandboxes/{id}/archive", false},
    {"PUT", "/v1/sandboxes/{id}/archive", true},
    {"POST", "/v1/sandboxes/{id}/processes", false},
    {"GET", "/v1/sandboxes/{id}/processes", false},
    {"GET", "/v1/sandboxes/{id}/processes/{pid}", false},
    {"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", false},
    {"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", false},
    {"GET", "/v1/sandboxes/{id}/processes/{pid}/output", false},
    {"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", false},
    {"GET", "/v1/sandboxes/{id}/processes/{pid}/tty", false},
    {"GET", "/v1/snapshots", false},
    {"GET", "/v1/snapshots/{name}", false},
    {"DELETE", "/v1/snapshots/{name}", false},
    {"POST", "/v1/disks", false},
    {"GET", "/v1/disks", false},
    {"GET", "/v1/disks/{id}", false},
    {"DELETE", "/v1/disks/{id}", false},
    {"POST", "/v1/disks/{id}/exec", false},
    {"GET", "/v1/disks/{id}/files", false},
    {"PUT", "/v1/disks/{id}/files", false},
    {"GET", "/v1/usage", false},
    {"GET", "/v1/secrets", false},
    {"PUT", "/v1/secrets/{name}", false},
    {"DELETE", "/v1/secrets/{name}", false},
    {"GET", "/v1/images", false},
    {"POST", "/v1/images/{name}", true},
};

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream ss(path);
  std::string seg;
  while (std::getline(ss, seg, '/'))
    if (!seg.empty()) out.push_back(PercentDecode(seg, false));
  return out;
}

json SandboxJson(const core::SandboxView& v) {
  const auto& r = v.rec;
  json j = {{"id", r.id},
            {"name", r.name.empty() ? json(nullptr) : json(r.name)},
            {"state", r.state},
            {"type", r.type},
            {"isolation", r.isolation},
            {"image", r.image},
            {"created_at", FormatRfc3339(r.created_ms)},
            {"expires_at", r.expires_ms && (r.state == "running" || r.state == "paused")
                               ? json(FormatRfc3339(r.expires_ms)) : json(nullptr)},
            {"ttl_seconds", r.ttl_seconds},
            {"ttl_action", r.ttl_action},
            {"idle_timeout_seconds", r.idle_timeout_seconds},
            // What keeps a sandbox from being idle (docs/API.md, "Idle policy").
            {"idle_activity", {"api_calls", "running_execs", "file_transfers", "port_traffic", "captures", "cpu_use"}},
            {"auto_resume", r.auto_resume},
            {"public", r.public_ports},
            {"pause_mode", r.state == "paused" ? json(r.pause_mode) : json(nullptr)},
            {"paused_at", r.state == "paused" && r.paused_ms ? json(FormatRfc3339(r.paused_ms)) : json(nullptr)},
            {"billing", r.billing == "call" ? "per_call" : "per_second"},
            {"no_env", r.no_env},
            {"resources", {{"cpus", r.cpus}, {"memory_mb", r.memory_mb}, {"disk_mb", r.disk_mb}, {"pids", r.pids}}},
            {"billed_seconds", v.billed_seconds},
            {"cost_usd", v.cost_usd}};
  auto md = json::parse(r.metadata_json, nullptr, false);
  j["metadata"] = md.is_object() ? md : json::object();
  auto net = json::parse(r.network_json, nullptr, false);
  j["network"] = net.is_object() ? net : json::object();
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  return j;
}

json SnapshotJson(const storage::SnapshotRecord& r) {
  auto layers = json::parse(r.layers_json, nullptr, false);
  return {{"name", r.name},
          {"image", r.image},
          {"parent", r.parent.empty() ? json(nullptr) : json(r.parent)},
          {"source", r.source},
          {"size_bytes", r.size_bytes},
          {"layers", layers.is_array() ? layers.size() : 0},
          {"created_at", FormatRfc3339(r.created_ms)}};
}

json DiskJson(const storage::DiskRecord& d, int64_t used) {
  return {{"id", d.id},
          {"name", d.name.empty() ? json(nullptr) : json(d.name)},
          {"size_mb", d.size_mb},
          {"used_bytes", used},
          {"created_at", FormatRfc3339(d.created_ms)}};
}

// Gathers a buffered exec's stdout and stderr for its JSON answer.
struct Collector {
  std::shared_ptr<std::string> out = std::make_shared<std::string>();
  std::shared_ptr<std::string> err = std::make_shared<std::string>();
  agent::OutputFn Fn() const {
    return [o = out, e = err](agent::FrameType t, std::string_view d) -> asio::awaitable<void> {
      if (t == agent::FrameType::kStdout) o->append(d);
      else if (t == agent::FrameType::kStderr) e->append(d);
      co_return;
    };
  }
  // The answer: `head` and the output, streamed out (api/exec_answer.h); each stream's
  // JSON is capped at twice the raw output cap.
  Response Answer(int status, json head, uint64_t output_cap) const {
    return ExecAnswer(status, std::move(head), out, err, 2 * output_cap);
  }
};

json ExitJson(const core::ExecResult& r) {
  json j = {{"exit_code", r.exit.exit_code},
            {"timed_out", r.exit.timed_out},
            {"stdout_truncated", r.exit.stdout_truncated},
            {"stderr_truncated", r.exit.stderr_truncated},
            {"timing", {{"queue_ms", std::round(r.queue_ms_exact * 1000) / 1000},
                        {"execute_ms", std::round(r.execute_ms_exact * 1000) / 1000}}},
            {"cost_usd", r.cost_usd}};
  if (r.exit.signal) j["signal"] = r.exit.signal;
  return j;
}

}  // namespace

const std::vector<RouteInfo>& Routes() { return kRoutes; }

Api::Api(core::SandboxManager* manager, layers::ImageStore* images, disks::DiskStore* disks,
         std::string admin_key_hash, asio::thread_pool* pool, std::string tmp_dir)
    : manager_(manager), images_(images), disks_(disks), admin_key_hash_(std::move(admin_key_hash)),
      pool_(pool), tmp_dir_(std::move(tmp_dir)), processes_(std::make_unique<core::ProcessTable>(manager)) {}

Api::~Api() = default;

std::optional<std::string> Api::SandboxOfPeer(int fd) const { return manager_->SandboxOfPeer(fd); }

const RouteInfo* Api::Match(Request& req) const {
  auto segs = Split(req.path);
  for (const auto& r : kRoutes) {
    if (req.method != r.method) continue;
    auto pat = Split(r.pattern);
    if (pat.size() != segs.size()) continue;
    std::map<std::string, std::string> params;
    bool ok = true;
    for (size_t i = 0; i < pat.size() && ok; ++i) {
      if (pat[i].front() == '{') params[pat[i].substr(1, pat[i].size() - 2)] = segs[i];
      else ok = pat[i] == segs[i];
    }
    if (ok) {
      req.params = std::move(params);
      return &r;
    }
  }
  return nullptr;
}

Api::Caller Api::Authorize(const Request& req) const {
  if (!req.via_sandbox.empty()) return {Caller::kSandbox, req.via_sandbox};
  std::string h = req.Header("authorization");
  const std::string prefix = "Bearer ";
  if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return {};
  std::string presented = h.substr(prefix.size());
  if (presented.rfind("sbt_", 0) == 0) {
    auto id = manager_->SandboxOfToken(presented);
    if (id) return {Caller::kSandbox, *id};
    return {};
  }
  std::string got = Sha256Hex(presented);
  if (got.size() != admin_key_hash_.size()) return {};
  unsigned char diff = 0;  // constant time
  for (size_t i = 0; i < got.size(); ++i) diff |= got[i] ^ admin_key_hash_[i];
  if (diff != 0) return {};
  return {Caller::kAdmin, ""};
}

std::optional<Response> Api::Refusal(const RouteInfo& route, Request& req) const {
  std::string pat = route.pattern;
  if (pat == "/v1/health" || pat == "/v1/openapi.json") return std::nullopt;
  Caller caller = Authorize(req);
  req.admin = caller.kind == Caller::kAdmin;
  if (caller.kind == Caller::kNone)
    return ErrorResponse(401, "unauthorized", "a valid API key is required (Authorization: Bearer KEY)");
  if (caller.kind == Caller::kSandbox) {
    // A sandbox's token reads that sandbox and nothing else: it creates, execs and
    // deletes nothing.
    bool own = route.method == std::string("GET") && pat == "/v1/sandboxes/{id}" && req.params["id"] == caller.sandbox;
    if (!own) return ErrorResponse(403, "forbidden", "a sandbox token may only read its own sandbox");
  }
  return std::nullopt;
}

asio::awaitable<Response> Api::Handle(Request& req) {
  const RouteInfo* route = Match(req);
  if (!route) {
    std::string shown = req.path.size() > 200 ? req.path.substr(0, 200) + "..." : req.path;
    co_return ErrorResponse(404, "not_found", "no route for " + req.method + " " + shown);
  }
  std::string pat = route->pattern;
  if (auto refused = Refusal(*route, req)) co_return std::move(*refused);
  for (const auto& [k, v] : req.params) {
    if (pat.rfind("/v1/secrets/", 0) == 0) continue;  // environment names; checked by the manager
    if (!ValidName(v)) co_return Bad("invalid " + k + ": ids and names match [a-z0-9][a-z0-9._-]{0,62}");
  }
  // Any API call on a sandbox is activity for its idle policy.
  if (pat.rfind("/v1/sandboxes/{id}", 0) == 0) manager_->Touch(req.params["id"]);
  try {
    co_return co_await Dispatch(*route, req);
  } catch (const std::exception& e) {
    SBX_LOG(kError) << "handler for " << req.method << " " << req.path << " threw: " << e.what();
    co_return ErrorResponse(500, "internal", "internal error");
  }
}

asio::awaitable<Response> Api::Dispatch(const RouteInfo& route, Request& req) {
  const std::string pat = route.pattern;
  const std::string& m = req.method;

  if (pat == "/v1/health") {
    json health = {{"status", "ok"}, {"version", SBX_VERSION}};
    if (manager_->has_store()) {
      core::StoreStats s = manager_->StoreUse();
      health["store"] = {{"size_mb", s.size_mb},           {"free_mb", s.free_mb},
                         {"reserve_mb", s.reserve_mb},     {"committed_mb", s.committed_mb},
                         {"overcommit", s.overcommit > 0 ? json(s.overcommit) : json(nullptr)}};
    }
    co_return Json(200, health);
  }
  if (pat == "/v1/openapi.json") {
    Response r;
    r.body = OpenApiDocument();
    co_return r;
  }
  if (pat == "/metrics") {
    auto c = manager_->GetCounts();
    std::ostringstream o;
    o << "# HELP sbx_sandboxes Sandboxes by state.\n# TYPE sbx_sandboxes gauge\n";
    // Every state and wall, zeros included, so a series never vanishes.
    auto by = c.by_state;
    for (const char* state : {"creating", "running", "paused", "stopped", "error"})
      for (const char* wall : {"container", "gvisor", "microvm"}) by[{state, wall}] += 0;
    by[{"deleting", "container"}] += c.deleting;
    for (const auto& [k, n] : by)
      o << "sbx_sandboxes{state=\"" << k.first << "\",isolation=\"" << k.second << "\"} " << n << "\n";
    o << "# TYPE sbx_creates_total counter\nsbx_creates_total " << c.creates << "\n";
    o << "# TYPE sbx_execs_total counter\nsbx_execs_total " << c.execs << "\n";
    o << "# TYPE sbx_deletes_total counter\nsbx_deletes_total " << c.deletes << "\n";
    o << "# TYPE sbx_snapshots_total counter\nsbx_snapshots_total " << c.snapshots << "\n";
    o << "# TYPE sbx_forks_total counter\nsbx_forks_total " << c.forks << "\n";
    o << "# TYPE sbx_pauses_total counter\nsbx_pauses_total " << c.pauses << "\n";
    o << "# TYPE sbx_resumes_total counter\nsbx_resumes_total " << c.resumes << "\n";
    auto& lat = manager_->latencies();
    lat.create.Write(o, "sbx_create_seconds", "Time to create a sandbox, to ready.");
    lat.exec.Write(o, "sbx_exec_seconds", "Time of an exec, from arrival to its answer.");
    lat.snapshot.Write(o, "sbx_snapshot_seconds", "Time to take a named snapshot.");
    lat.fork.Write(o, "sbx_fork_seconds", "Time to fork a sandbox (all its copies).");
    lat.pause.Write(o, "sbx_pause_seconds", "Time to pause (freeze) a sandbox.");
    lat.resume.Write(o, "sbx_resume_seconds", "Time to resume (thaw) a frozen sandbox.");
    lat.hibernate.Write(o, "sbx_hibernate_seconds", "Time to hibernate a sandbox (checkpoint to disk).");
    lat.restore.Write(o, "sbx_restore_seconds", "Time to resume a hibernated sandbox (restore from disk).");
    lat.disk_exec.Write(o, "sbx_disk_exec_seconds", "Time of a serverless call on a disk, end to end.");
    o << "# HELP sbx_pool_ready Booted, warmed sandboxes waiting in the warm pool.\n"
      << "# TYPE sbx_pool_ready gauge\nsbx_pool_ready " << c.pooled << "\n";
    o << "# TYPE sbx_pool_claims_total counter\nsbx_pool_claims_total " << c.pool_claims << "\n";
    o << "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes "
      << proc::SelfRssBytes() << "\n";
    o << "# HELP process_resident_memory_peak_bytes The most resident memory sbxd has had.\n"
      << "# TYPE process_resident_memory_peak_bytes gauge\nprocess_resident_memory_peak_bytes "
      << proc::SelfPeakRssBytes() << "\n";
    o << "# TYPE process_open_fds gauge\nprocess_open_fds " << proc::SelfFdCount() << "\n";
    Response r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = o.str();
    co_return r;
  }

  if (pat == "/v1/sandboxes" && m == "POST") {
    auto decoded = DecodeCreate(req.body);
    if (!decoded.ok()) co_return ErrorResponse(decoded.error());
    core::CreateRequest c = std::move(*decoded);
    std::function<Result<core::SandboxView>()> fn = [this, &c] { return manager_->Create(c); };
    int64_t t0 = NowUs();
    auto v = co_await RunBlocking(pool_, &fn);
    if (!v.ok()) co_return ErrorResponse(v.error());
    manager_->latencies().create.ObserveMs((NowUs() - t0) / 1000.0);
    co_return Json(201, SandboxJson(*v));
  }

  if (pat == "/v1/sandboxes" && m == "GET") {
    core::ListFilter f;
    for (const auto& [k, v] : req.query) {
      if (k == "name") f.name = v;
      else if (k == "state") f.state = v;
      else if (k.rfind("metadata.", 0) == 0 && k.size() > 9) f.metadata[k.substr(9)] = v;
      else co_return Bad("unknown filter \"" + k + "\"");
    }
    auto list = manager_->List(f);
    if (!list.ok()) co_return ErrorResponse(list.error());
    json arr = json::array();
    for (const auto& v : *list) arr.push_back(SandboxJson(v));
    co_return Json(200, {{"sandboxes", arr}});
  }

  if (pat == "/v1/sandboxes/{id}") {
    const std::string& id = req.params["id"];
    if (m == "GET") {
      auto v = manager_->Get(id);
      if (!v.ok()) co_return ErrorResponse(v.error());
      co_return Json(200, SandboxJson(*v));
    }
    if (m == "PATCH") {
      auto j = ParseObject(req.body, {"ttl_seconds", "ttl_action", "idle_timeout_seconds", "auto_resume", "public"});
      if (!j.ok()) co_return ErrorResponse(j.error());
      core::UpdateRequest u;
      auto ttl = GetInt(*j, "ttl_seconds");
      auto idle = GetInt(*j, "idle_timeout_seconds");
      if (!ttl.ok()) co_return ErrorResponse(ttl.error());
      if (!idle.ok()) co_return ErrorResponse(idle.error());
      u.ttl_seconds = *ttl;
      u.idle_timeout_seconds = *idle;
      if (j->contains("ttl_action") && !(*j)["ttl_action"].is_null()) {
        auto a = GetString(*j, "ttl_action");
        if (!a.ok()) co_return ErrorResponse(a.error());
        u.ttl_action = *a;
      }
      if (j->contains("auto_resume") && !(*j)["auto_resume"].is_null()) {
        auto a = GetBool(*j, "auto_resume", true);
        if (!a.ok()) co_return ErrorResponse(a.error());
        u.auto_resume = *a;
      }
      if (j->contains("public") && !(*j)["public"].is_null()) {
        auto a = GetBool(*j, "public", false);
        if (!a.ok()) co_return ErrorResponse(a.error());
        u.public_ports = *a;
      }
      auto v = manager_->Update(id, u);
      if (!v.ok()) co_return ErrorResponse(v.error());
      co_return Json(200, SandboxJson(*v));
    }
    auto st = manager_->Delete(id);
    if (!st.ok()) co_return ErrorResponse(st.error());
    processes_->Forget(id);
    co_return Json(200, {{"type", "sandbox.deleted"}, {"id", id}});
  }

  if (pat == "/v1/sandboxes/{id}/timeout") {
    auto j = ParseObject(req.body, {"timeout_seconds"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto t = GetInt(*j, "timeout_seconds");
    if (!t.ok()) co_return ErrorResponse(t.error());
    if (!*t) co_return Bad("timeout_seconds is required");
    core::UpdateRequest u;
    u.ttl_seconds = *t;
    auto v = manager_->Update(req.params["id"], u);
    if (!v.ok()) co_return ErrorResponse(v.error());
    co_return Json(200, SandboxJson(*v));
  }

  if (pat == "/v1/sandboxes/{id}/pause" || pat == "/v1/sandboxes/{id}/resume") {
    bool pause = pat.back() == 'e' && pat.find("/pause") != std::string::npos;
    auto j = ParseObject(req.body, pause ? std::set<std::string>{"mode"} : std::set<std::string>{});
    if (!j.ok()) co_return ErrorResponse(j.error());
    std::string mode = "freeze";
    if (pause) {
      auto md = GetString(*j, "mode", "freeze");
      if (!md.ok()) co_return ErrorResponse(md.error());
      mode = *md;
    }
    std::string id = req.params["id"];
    std::function<Result<core::SandboxView>()> fn = [this, &id, &mode, pause] {
      return pause ? manager_->Pause(id, mode) : manager_->Resume(id);
    };
    auto v = co_await RunBlocking(pool_, &fn);
    if (!v.ok()) co_return ErrorResponse(v.error());
    co_return Json(200, SandboxJson(*v));
  }

  if (pat == "/v1/secrets") {
    auto list = manager_->ListSecrets();
    if (!list.ok()) co_return ErrorResponse(list.error());
    json arr = json::array();
    for (const auto& [name, ms] : *list) arr.push_back({{"name", name}, {"updated_at", FormatRfc3339(ms)}});
    co_return Json(200, {{"secrets", arr}});  // names only: values never leave sbxd but into sandboxes
  }
  if (pat == "/v1/secrets/{name}") {
    const std::string& name = req.params["name"];
    if (m == "DELETE") {
      auto st = manager_->DeleteSecret(name);
      if (!st.ok()) co_return ErrorResponse(st.error());
      co_return Json(200, {{"type", "secret.deleted"}, {"name", name}});
    }
    auto j = ParseObject(req.body, {"value"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    if (!j->contains("value") || !(*j)["value"].is_string()) co_return Bad("value (a string) is required");
    auto st = manager_->SetSecret(name, (*j)["value"].get<std::string>());
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "secret.set"}, {"name", name}});
  }

  if (pat == "/v1/usage") {
    int64_t now = NowUnixMs();
    int64_t from = 0, to = now + 1;
    for (const auto& [k, v] : req.query) {
      if (k != "from" && k != "to") co_return Bad("unknown parameter \"" + k + "\" (from, to)");
      int64_t t = ParseTimeMs(v);
      if (t < 0) co_return Bad(k + " must be an RFC 3339 time (2026-01-31T12:00:00Z) or Unix seconds");
      (k == "from" ? from : to) = t;
    }
    auto u = manager_->Usage(from, to);
    if (!u.ok()) co_return ErrorResponse(u.error());
    auto r6 = [](double x) { return std::round(x * 1e9) / 1e9; };
    auto r3 = [](double x) { return std::round(x * 1000) / 1000; };
    json sbs = json::array();
    for (const auto& l : u->sandboxes)
      sbs.push_back({{"id", l.id}, {"name", l.name.empty() ? json(nullptr) : json(l.name)}, {"type", l.type},
                     {"billed_seconds", r3(l.seconds)}, {"cost_usd", r6(l.cost_usd)}});
    json types = json::object();
    for (const auto& [t, sc] : u->by_type) types[t] = {{"billed_seconds", r3(sc.first)}, {"cost_usd", r6(sc.second)}};
    co_return Json(200, {{"from", FormatRfc3339(u->from_ms)},
                         {"to", FormatRfc3339(u->to_ms)},
                         {"sandboxes", sbs},
                         {"types", types},
                         {"serverless", {{"calls", u->calls}, {"cost_usd", r6(u->calls_usd)}}},
                         {"total", {{"billed_seconds", r3(u->seconds)},
                                    {"compute_usd", r6(u->compute_usd)},
                                    {"cost_usd", r6(u->total_usd)}}}});
  }

  if (pat == "/v1/sandboxes/{id}/stop" || pat == "/v1/sandboxes/{id}/start") {
    auto j = ParseObject(req.body, {});
    if (!j.ok()) co_return ErrorResponse(j.error());
    std::string id = req.params["id"];
    bool stop = pat.back() == 'p';
    std::function<Result<core::SandboxView>()> fn = [this, &id, stop] {
      return stop ? manager_->Stop(id) : manager_->Start(id);
    };
    auto v = co_await RunBlocking(pool_, &fn);
    if (!v.ok()) co_return ErrorResponse(v.error());
    co_return Json(200, SandboxJson(*v));
  }

  if (pat == "/v1/sandboxes/{id}/exec") {
    auto j = ParseObject(req.body, {"cmd", "cwd", "env", "stdin", "timeout_seconds"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    core::ExecRequest e;
    e.arrival_us = req.arrival_us;
    if (auto st = DecodeCommand(*j, &e); !st.ok()) co_return ErrorResponse(st.error());
    auto timeout = GetInt(*j, "timeout_seconds");
    if (!timeout.ok()) co_return ErrorResponse(timeout.error());
    e.timeout_seconds = timeout->value_or(60);
    if (j->contains("stdin") && !(*j)["stdin"].is_null()) {
      if (!(*j)["stdin"].is_string()) co_return Bad("stdin must be a string");
      e.stdin_data = (*j)["stdin"].get<std::string>();
    }
    std::string id = req.params["id"];
    // auto_resume: a paused sandbox wakes for the exec (its queue_ms counts the wait).
    if (auto st = co_await ResumeIfWanted(id); !st.ok()) co_return ErrorResponse(st.error());
    auto ex = co_await asio::this_coro::executor;
    bool ndjson = req.Header("accept").find("application/x-ndjson") != std::string::npos;
    if (!ndjson) {
      Collector out;
      agent::OutputFn collect = out.Fn();
      auto res = co_await manager_->Exec(ex, id, std::move(e), collect);
      if (!res.ok()) co_return ErrorResponse(res.error());
      json head = ExitJson(*res);
      co_return out.Answer(200, std::move(head), manager_->output_cap());
    }
    Response r;
    r.content_type = "application/x-ndjson";
    auto* mgr = manager_;
    r.stream = [mgr, ex, id, e = std::move(e)](ChunkSink sink) mutable
        -> asio::awaitable<std::optional<Response>> {
      auto carry = std::make_shared<std::array<std::string, 2>>();
      auto gone = std::make_shared<bool>(false);
      auto started = std::make_shared<bool>(false);
      agent::OutputFn forward = [sink, carry, gone, started](agent::FrameType t,
                                                             std::string_view d) -> asio::awaitable<void> {
        if (*gone) co_return;
        json line;
        if (t == agent::FrameType::kKeepalive) {
          line = {{"type", "keepalive"}};
        } else {
          int k = t == agent::FrameType::kStdout ? 0 : 1;
          std::string text = TakeUtf8((*carry)[k], d);
          if (text.empty()) co_return;
          line = {{"type", k == 0 ? "stdout" : "stderr"}, {"data", text}};
        }
        *started = true;
        std::string out = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        if (!co_await sink(out)) *gone = true;
      };
      auto res = co_await mgr->Exec(ex, id, std::move(e), forward);
      if (!res.ok()) {
        if (!*started) co_return ErrorResponse(res.error());
        json line = {{"type", "error"}, {"error", {{"code", ErrorCode(res.error().code)}, {"message", res.error().message}}}};
        std::string out = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        co_await sink(out);
        co_return std::nullopt;
      }
      for (int k = 0; k < 2; ++k)
        if (!(*carry)[k].empty()) {
          json line = {{"type", k == 0 ? "stdout" : "stderr"}, {"data", (*carry)[k]}};
          std::string out = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
          co_await sink(out);
        }
      json last = ExitJson(*res);
      last["type"] = "exit";
      std::string out = last.dump() + "\n";
      co_await sink(out);
      co_return std::nullopt;
    };
    co_return r;
  }

  if (pat.rfind("/v1/sandboxes/{id}/processes", 0) == 0) co_return co_await DispatchProcesses(pat, req);
  if (pat.rfind("/v1/sandboxes/{id}/files", 0) == 0 || pat == "/v1/sandboxes/{id}/archive")
    co_return co_await DispatchFiles(pat, req);

  if (pat == "/v1/sandboxes/{id}/snapshot") {
    auto j = ParseObject(req.body, {"name"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto name = GetString(*j, "name");
    if (!name.ok()) co_return ErrorResponse(name.error());
    if (name->empty()) co_return Bad("name is required");
    std::string id = req.params["id"];
    std::function<Result<storage::SnapshotRecord>()> fn = [this, &id, &name] {
      return manager_->Snapshot(id, *name);
    };
    int64_t t0 = NowUs();
    auto rec = co_await RunBlocking(pool_, &fn);
    if (!rec.ok()) co_return ErrorResponse(rec.error());
    manager_->latencies().snapshot.ObserveMs((NowUs() - t0) / 1000.0);
    json out = SnapshotJson(*rec);
    out["type"] = "snapshot.named.created";
    co_return Json(201, out);
  }

  if (pat == "/v1/sandboxes/{id}/fork") {
    auto j = ParseObject(req.body, {"count"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto count = GetInt(*j, "count");
    if (!count.ok()) co_return ErrorResponse(count.error());
    int64_t n = count->value_or(1);
    if (n < 1 || n > 64) co_return Bad("count must be between 1 and 64");
    std::string id = req.params["id"];
    std::function<Result<std::vector<core::SandboxView>>()> fn = [this, &id, n] {
      return manager_->Fork(id, static_cast<int>(n));
    };
    int64_t t0 = NowUs();
    auto list = co_await RunBlocking(pool_, &fn);
    if (!list.ok()) co_return ErrorResponse(list.error());
    manager_->latencies().fork.ObserveMs((NowUs() - t0) / 1000.0);
    json arr = json::array();
    for (const auto& v : *list) arr.push_back(SandboxJson(v));
    co_return Json(201, {{"sandboxes", arr}});
  }

  if (pat == "/v1/snapshots") {
    auto list = manager_->ListSnapshots();
    if (!list.ok()) co_return ErrorResponse(list.error());
    json arr = json::array();
    for (const auto& r : *list) arr.push_back(SnapshotJson(r));
    co_return Json(200, {{"snapshots", arr}});
  }

  if (pat == "/v1/snapshots/{name}") {
    std::string name = req.params["name"];
    if (m == "GET") {
      auto rec = manager_->GetSnapshot(name);
      if (!rec.ok()) co_return ErrorResponse(rec.error());
      co_return Json(200, SnapshotJson(*rec));
    }
    std::function<Status()> fn = [this, &name] { return manager_->DeleteSnapshot(name); };
    auto st = co_await RunBlocking(pool_, &fn);
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "snapshot.named.deleted"}, {"name", name}});
  }

  if (pat == "/v1/disks" || pat == "/v1/disks/{id}") {
    if (!disks_) co_return ErrorResponse(503, "unavailable", "disks are not available on this sbxd");
    if (pat == "/v1/disks" && m == "POST") {
      auto j = ParseObject(req.body, {"name", "size_mb"});
      if (!j.ok()) co_return ErrorResponse(j.error());
      if (Status space = manager_->CheckDataDirSpace(); !space.ok()) co_return ErrorResponse(space.error());
      auto name = GetString(*j, "name");
      auto size = GetInt(*j, "size_mb");
      if (!name.ok()) co_return ErrorResponse(name.error());
      if (!size.ok()) co_return ErrorResponse(size.error());
      int64_t mb = size->value_or(1024);
      std::function<Result<storage::DiskRecord>()> fn = [this, &name, mb]() -> Result<storage::DiskRecord> {
        auto made = disks_->Create(*name, mb);
        if (!made.ok()) return OnDataDir(made.error());
        return made;
      };
      auto d = co_await RunBlocking(pool_, &fn);
      if (!d.ok()) co_return ErrorResponse(d.error());
      co_return Json(201, DiskJson(*d, disks_->UsedBytes(d->id)));
    }
    if (pat == "/v1/disks") {
      auto list = disks_->List();
      if (!list.ok()) co_return ErrorResponse(list.error());
      json arr = json::array();
      for (const auto& d : *list) arr.push_back(DiskJson(d, disks_->UsedBytes(d.id)));
      co_return Json(200, {{"disks", arr}});
    }
    std::string id = req.params["id"];
    if (m == "GET") {
      auto d = disks_->Get(id);
      if (!d.ok()) co_return ErrorResponse(d.error());
      co_return Json(200, DiskJson(*d, disks_->UsedBytes(d->id)));
    }
    std::function<Status()> fn = [this, &id] { return manager_->DeleteDisk(id); };
    auto st = co_await RunBlocking(pool_, &fn);
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "disk.deleted"}, {"id", id}});
  }

  if (pat == "/v1/disks/{id}/files") {
    if (!disks_) co_return ErrorResponse(503, "unavailable", "disks are not available on this sbxd");
    auto q = req.query.find("path");
    if (q == req.query.end() || q->second.empty()) co_return Bad("the path query parameter is required");
    std::string id = req.params["id"], path = q->second;
    if (m == "GET") {
      std::function<Result<std::string>()> fn = [this, &id, &path] { return disks_->ReadFile(id, path, 64 << 20); };
      auto data = co_await RunBlocking(pool_, &fn);
      if (!data.ok()) co_return ErrorResponse(data.error());
      Response r;
      r.content_type = "application/octet-stream";
      r.body = std::move(*data);
      co_return r;
    }
    std::function<Status()> fn = [this, &id, &path, &req] { return disks_->WriteFile(id, path, req.body); };
    auto st = co_await RunBlocking(pool_, &fn);
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"path", path}, {"size_bytes", req.body.size()}});
  }

  if (pat == "/v1/disks/{id}/exec") {
    if (!disks_) co_return ErrorResponse(503, "unavailable", "disks are not available on this sbxd");
    // A serverless call: a fresh sandbox with the disk at /mnt/disk, one command, gone.
    auto j = ParseObject(req.body, {"cmd", "cwd", "env", "timeout_seconds", "image", "from"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    core::ExecRequest e;
    e.arrival_us = req.arrival_us;
    std::string shell_cmd;  // a string command runs with the image's bash (or sh)
    if (auto st = ParseCmd(*j, &shell_cmd, &e.argv); !st.ok()) co_return ErrorResponse(st.error());
    auto cwd = GetString(*j, "cwd", "/mnt/disk");
    auto env = GetStringMap(*j, "env");
    auto timeout = GetInt(*j, "timeout_seconds");
    auto image = GetString(*j, "image");
    auto from = GetString(*j, "from");
    for (const Error* err : {cwd.ok() ? nullptr : &cwd.error(), env.ok() ? nullptr : &env.error(),
                             timeout.ok() ? nullptr : &timeout.error(), image.ok() ? nullptr : &image.error(),
                             from.ok() ? nullptr : &from.error()})
      if (err) co_return ErrorResponse(*err);
    e.timeout_seconds = timeout->value_or(300);
    if (e.timeout_seconds < 1 || e.timeout_seconds > 300) co_return Bad("timeout_seconds must be between 1 and 300");
    e.cwd = *cwd;
    e.env = *env;
    std::string id = req.params["id"];
    std::string img = *image, frm = *from;
    std::function<Result<core::SandboxView>()> fn = [this, &id, &img, &frm] {
      return manager_->CreateForDiskCall(id, img, frm);
    };
    auto sb = co_await RunBlocking(pool_, &fn);
    if (!sb.ok()) co_return ErrorResponse(sb.error());
    FaultPoint("disk_exec.created");
    std::string sid = sb->rec.id;
    if (!shell_cmd.empty()) e.argv = {manager_->ShellFor(*sb), "-c", shell_cmd};
    Collector out;
    agent::OutputFn collect = out.Fn();
    auto ex = co_await asio::this_coro::executor;
    auto res = co_await manager_->Exec(ex, sid, std::move(e), collect);
    (void)manager_->Delete(sid);  // the call's sandbox goes at once; its teardown runs behind
    if (!res.ok()) co_return ErrorResponse(res.error());
    // The disk's id as the call's sandbox recorded it (the request may name the disk).
    auto ds = json::parse(sb->rec.disks_json, nullptr, false);
    std::string disk_id = ds.is_array() && !ds.empty() && ds[0].is_object() ? ds[0].value("id", id) : id;
    if (Status st = manager_->RecordCall(disk_id, sid); !st.ok())
      SBX_LOG(kError) << "recording the serverless call on " << id << ": " << st.error().message;
    manager_->latencies().disk_exec.ObserveMs((NowUs() - req.arrival_us) / 1000.0);
    json body = ExitJson(*res);
    body["cost_usd"] = manager_->serverless_call_usd();
    if (res->exit.timed_out) {
      // Past the limit the whole tree is gone; the answer still carries what it printed.
      body["error"] = {{"code", "exec_timeout"}, {"message", "Exec timed out"}};
      co_return out.Answer(504, std::move(body), manager_->output_cap());
    }
    co_return out.Answer(200, std::move(body), manager_->output_cap());
  }

  if (pat == "/v1/images" && m == "GET") {
    auto list = images_->List();
    if (!list.ok()) co_return ErrorResponse(list.error());
    json arr = json::array();
    for (const auto& i : *list)
      arr.push_back({{"name", i.name}, {"size_bytes", i.size_bytes}, {"created_at", FormatRfc3339(i.created_ms)}});
    co_return Json(200, {{"images", arr}});
  }

  if (pat == "/v1/images/{name}") {
    std::string name = req.params["name"];
    std::string file = req.body_file;
    if (file.empty()) co_return Bad("the body must be a tar archive");
    std::function<Result<storage::ImageRecord>()> fn = [this, &name, &file] {
      return images_->ImportTar(name, file);
    };
    auto rec = co_await RunBlocking(pool_, &fn);
    if (!rec.ok()) co_return ErrorResponse(rec.error());
    co_return Json(201, {{"name", rec->name}, {"size_bytes", rec->size_bytes}, {"created_at", FormatRfc3339(rec->created_ms)}});
  }
  co_return ErrorResponse(404, "not_found", "no route");
}

}  // namespace sbx::api
