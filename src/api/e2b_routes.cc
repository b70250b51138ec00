// The E2B-compatible control plane: E2B's SDKs create, list, inspect, time out, pause,
// connect to and kill sandboxes through these routes, on sbxd's main listener, mapped onto
// the same manager as sbx's own API. The key comes as X-API-KEY and errors have E2B's
// shape, {"code": HTTP status, "message"} (routes.cc). docs/e2b.md has the mapping.
#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/http_request.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// The envd version the front reports: the newest that e2b@2.51.0 knows of, so that the
// SDK uses its current wire forms (no user sent by default, octet-stream uploads).
constexpr const char* kEnvdVersion = "0.6.4";
// E2B's templateID for its default template: sbxd's default image.
constexpr const char* kBaseTemplate = "base";
// E2B's API gives a sandbox 15 s when a create names no timeout.
constexpr int64_t kDefaultTimeoutSeconds = 15;

Response NoContent() {
  Response r;
  r.status = 204;
  return r;
}

// What E2B calls a sandbox's template: the snapshot it started from, else its image.
std::string TemplateOf(const storage::SandboxRecord& r) {
  if (!r.from_snapshot.empty()) return r.from_snapshot;
  return r.image;
}

// E2B knows two states: running and paused. A stopped sbx sandbox keeps its files and
// starts again on connect, as a paused E2B sandbox does without its memory.
std::string StateOf(const storage::SandboxRecord& r) {
  return r.state == "running" || r.state == "creating" ? "running" : "paused";
}

json ListedJson(const core::SandboxView& v) {
  const auto& r = v.rec;
  json md = json::parse(r.metadata_json, nullptr, false);
  json out = {{"sandboxID", r.id},
              {"templateID", TemplateOf(r)},
              {"clientID", "sbx"},
              {"startedAt", FormatRfc3339(r.created_ms)},
              {"endAt", r.expires_ms > 0 ? json(FormatRfc3339(r.expires_ms)) : json(nullptr)},
              {"cpuCount", r.cpus},
              {"memoryMB", r.memory_mb},
              {"diskSizeMB", r.disk_mb},
              {"metadata", md.is_object() ? md : json::object()},
              {"state", StateOf(r)},
              {"envdVersion", kEnvdVersion},
              {"volumeMounts", json::array()}};
  // E2B's alias is its template's name: here the template is named already.
  if (!TemplateOf(r).empty()) out["alias"] = TemplateOf(r);
  json disks = json::parse(r.disks_json, nullptr, false);
  if (disks.is_array())
    for (const auto& d : disks)
      if (d.is_object())
        out["volumeMounts"].push_back({{"name", d.value("id", "")}, {"path", d.value("mount_path", "")}});
  return out;
}

// Every sandbox but one being deleted: E2B's two states hold them all (one in error, its
// init gone, is paused: a connect starts it again, a kill deletes it).
bool Listable(const storage::SandboxRecord& r) { return r.state != "deleting"; }

// "k=v&k2=v2" (each part percent-encoded), as the SDK sends metadata filters.
std::map<std::string, std::string> ParsePairs(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t amp = s.find('&', i);
    std::string part = s.substr(i, amp == std::string::npos ? std::string::npos : amp - i);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string k = PercentDecode(part.substr(0, eq), true);
      std::string v = eq == std::string::npos ? "" : PercentDecode(part.substr(eq + 1), true);
      out[k] = v;
    }
    if (amp == std::string::npos) break;
    i = amp + 1;
  }
  return out;
}

// The E2B create body as sbx's create request (sbx validates the values themselves).
Result<core::CreateRequest> DecodeE2bCreate(const std::string& body, bool* is_snapshot,
                                            const std::function<bool(const std::string&)>& snapshot_exists) {
  SBX_ASSIGN_OR_RETURN(json j, ParseObject(body, {"templateID", "timeout", "envVars", "metadata", "secure",
                                                  "allow_internet_access", "autoPause", "autoPauseMemory",
                                                  "autoResume", "mcp", "network", "iam", "volumeMounts"}));
  core::CreateRequest c;
  SBX_ASSIGN_OR_RETURN(std::string tpl, GetString(j, "templateID", kBaseTemplate));
  if (tpl.empty()) tpl = kBaseTemplate;
  *is_snapshot = false;
  if (tpl != kBaseTemplate) {
    if (!ValidName(tpl)) return MakeError(Code::kInvalidArgument, "templateID \"" + tpl + "\" is not a valid name");
    if (snapshot_exists(tpl)) {
      c.from = tpl;
      *is_snapshot = true;
    } else {
      c.image = tpl;
    }
  }
  SBX_ASSIGN_OR_RETURN(auto timeout, GetInt(j, "timeout"));
  c.ttl_seconds = timeout.value_or(kDefaultTimeoutSeconds);
  SBX_ASSIGN_OR_RETURN(c.env, GetStringMap(j, "envVars"));
  SBX_ASSIGN_OR_RETURN(c.metadata, GetStringMap(j, "metadata"));
  SBX_ASSIGN_OR_RETURN(bool secure, GetBool(j, "secure", true));
  (void)secure;  // every sandbox of the front needs its access token
  SBX_ASSIGN_OR_RETURN(bool auto_pause, GetBool(j, "autoPause", false));
  SBX_ASSIGN_OR_RETURN(bool keep_memory, GetBool(j, "autoPauseMemory", true));
  // At its timeout an E2B sandbox is killed, or paused with autoPause (its memory kept
  // unless autoPauseMemory is false: then only its files, as sbx's stop keeps them).
  c.ttl_action = !auto_pause ? "delete" : keep_memory ? "pause" : "stop";
  // E2B resumes a paused sandbox on use only when asked to (sbx's own default is on).
  c.auto_resume = false;
  if (j.contains("autoResume") && !j["autoResume"].is_null()) {
    if (!j["autoResume"].is_object()) return MakeError(Code::kInvalidArgument, "autoResume must be an object");
    SBX_ASSIGN_OR_RETURN(c.auto_resume, GetBool(j["autoResume"], "enabled", false));
  }
  for (const char* unsupported : {"mcp", "iam"})
    if (j.contains(unsupported) && !j[unsupported].is_null())
      return MakeError(Code::kInvalidArgument, std::string(unsupported) + " is not supported by sbx");
  json net = json::object();
  if (j.contains("allow_internet_access") && !j["allow_internet_access"].is_null()) {
    SBX_ASSIGN_OR_RETURN(bool internet, GetBool(j, "allow_internet_access", true));
    net["mode"] = internet ? "outbound" : "none";
  }
  if (j.contains("network") && !j["network"].is_null()) {
    const json& n = j["network"];
    if (!n.is_object()) return MakeError(Code::kInvalidArgument, "network must be an object");
    for (auto& [k, v] : n.items()) {
      if (v.is_null()) continue;
      if (k == "allowOut") net["allow"] = v;
      else if (k == "denyOut") net["deny"] = v;
      else return MakeError(Code::kInvalidArgument, "network." + k + " is not supported by sbx");
    }
    if (net.contains("allow") && !net.contains("mode")) net["mode"] = "outbound";
  }
  if (!net.empty()) c.network = net;
  if (j.contains("volumeMounts") && !j["volumeMounts"].is_null()) {
    const json& vs = j["volumeMounts"];
    if (!vs.is_array()) return MakeError(Code::kInvalidArgument, "volumeMounts must be an array of {name, path}");
    for (const auto& v : vs) {
      if (!v.is_object()) return MakeError(Code::kInvalidArgument, "volumeMounts must be an array of {name, path}");
      SBX_ASSIGN_OR_RETURN(std::string name, GetString(v, "name"));
      SBX_ASSIGN_OR_RETURN(std::string path, GetString(v, "path"));
      if (!ValidName(name)) return MakeError(Code::kInvalidArgument, "volumeMounts[].name is not a valid disk name");
      c.disks.emplace_back(name, path);
    }
  }
  return c;
}

}  // namespace

Response E2bError(const Error& e) {
  Response r = Json(HttpStatus(e.code), {{"code", HttpStatus(e.code)}, {"message", e.message}});
  AddRetryHint(e, &r);
  return r;
}

bool IsE2bRoute(std::string_view pattern) {
  for (const char* prefix : {"/sandboxes", "/v2/sandboxes", "/health", "/process.", "/filesystem.", "/files"})
    if (pattern.rfind(prefix, 0) == 0) return true;
  return false;
}

json Api::E2bSandboxJson(const core::SandboxView& v) const {
  return {{"sandboxID", v.rec.id},
          {"templateID", TemplateOf(v.rec)},
          {"clientID", "sbx"},
          {"envdVersion", kEnvdVersion},
          {"envdAccessToken", manager_->secrets().AccessTokenFor(v.rec.id)},
          {"domain", nullptr}};
}

asio::awaitable<Response> Api::E2bCreate(Request& req) {
  bool from_snapshot = false;
  auto decoded = DecodeE2bCreate(req.body, &from_snapshot,
                                 [this](const std::string& n) { return manager_->GetSnapshot(n).ok(); });
  if (!decoded.ok()) co_return E2bError(decoded.error());
  auto v = co_await manager_->CreateCall(std::move(*decoded));
  if (!v.ok()) co_return E2bError(v.error());
  co_return Json(201, E2bSandboxJson(*v));
}

asio::awaitable<Response> Api::E2bList(Request& req) {
  core::ListFilter f;
  std::set<std::string> states;
  std::string tpl, order = "asc";
  int64_t after_ms = -1;
  size_t limit = 0, offset = 0;
  for (const auto& [k, v] : req.query) {
    if (k == "metadata") f.metadata = ParsePairs(v);
    else if (k == "state") {
      for (size_t i = 0; i <= v.size();) {
        size_t comma = v.find(',', i);
        std::string s = v.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
        if (s != "running" && s != "paused")
          co_return E2bError(MakeError(Code::kInvalidArgument, "state must be running or paused"));
        states.insert(s);
        if (comma == std::string::npos) break;
        i = comma + 1;
      }
    } else if (k == "template") tpl = v;
    else if (k == "startedAfter") {
      after_ms = ParseTimeMs(v);
      if (after_ms < 0) co_return E2bError(MakeError(Code::kInvalidArgument, "startedAfter must be an RFC 3339 time"));
    }
    else if (k == "order") {
      if (v != "asc" && v != "desc") co_return E2bError(MakeError(Code::kInvalidArgument, "order must be asc or desc"));
      order = v;
    } else if (k == "limit" || k == "nextToken") {
      size_t n = 0;
      if (v.empty() || v.size() > 9 || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        co_return E2bError(MakeError(Code::kInvalidArgument, k + " must be a whole number"));
      n = std::stoul(v);
      (k == "limit" ? limit : offset) = n;
    } else {
      co_return E2bError(MakeError(Code::kInvalidArgument, "unknown query parameter \"" + k + "\""));
    }
  }
  auto list = manager_->List(f);
  if (!list.ok()) co_return E2bError(list.error());
  std::vector<const core::SandboxView*> picked;
  for (const auto& v : *list) {
    if (!Listable(v.rec)) continue;
    if (!states.empty() && !states.count(StateOf(v.rec))) continue;
    if (!tpl.empty() && TemplateOf(v.rec) != tpl) continue;
    if (after_ms >= 0 && v.rec.created_ms <= after_ms) continue;
    picked.push_back(&v);
  }
  std::stable_sort(picked.begin(), picked.end(), [&](const core::SandboxView* a, const core::SandboxView* b) {
    return order == "asc" ? a->rec.created_ms < b->rec.created_ms : a->rec.created_ms > b->rec.created_ms;
  });
  json arr = json::array();
  size_t end = limit > 0 ? std::min(picked.size(), offset + limit) : picked.size();
  for (size_t i = offset; i < end; ++i) arr.push_back(ListedJson(*picked[i]));
  Response r = Json(200, arr);
  if (end < picked.size()) r.headers.emplace_back("x-next-token", std::to_string(end));
  co_return r;
}

asio::awaitable<Response> Api::E2bGet(Request& req) {
  auto v = manager_->Get(req.params["id"]);
  if (!v.ok()) co_return E2bError(v.error());
  json out = ListedJson(*v);
  out["envdAccessToken"] = manager_->secrets().AccessTokenFor(v->rec.id);
  co_return Json(200, out);
}

asio::awaitable<Response> Api::E2bKill(Request& req) {
  const std::string& id = req.params["id"];
  auto st = manager_->Delete(id);
  if (!st.ok()) co_return E2bError(st.error());
  co_return NoContent();
}

asio::awaitable<Response> Api::E2bTimeout(Request& req) {
  auto j = ParseObject(req.body, {"timeout"});
  if (!j.ok()) co_return E2bError(j.error());
  auto t = GetInt(*j, "timeout");
  if (!t.ok()) co_return E2bError(t.error());
  if (!*t) co_return E2bError(MakeError(Code::kInvalidArgument, "timeout is required"));
  core::UpdateRequest u;
  u.ttl_seconds = *t;
  auto v = manager_->Update(req.params["id"], u);
  if (!v.ok()) co_return E2bError(v.error());
  co_return NoContent();
}

asio::awaitable<Response> Api::E2bPause(Request& req) {
  auto j = ParseObject(req.body, {"memory"});
  if (!j.ok()) co_return E2bError(j.error());
  auto memory = GetBool(*j, "memory", true);
  if (!memory.ok()) co_return E2bError(memory.error());
  std::string id = req.params["id"];
  auto cur = manager_->Get(id);
  if (!cur.ok()) co_return E2bError(cur.error());
  if (StateOf(cur->rec) == "paused")
    co_return E2bError(MakeError(Code::kFailedPrecondition, "sandbox " + id + " is already paused"));
  // With its memory: a freeze (its processes go on where they were); without: a stop
  // (its files only).
  bool keep = *memory;
  std::function<Result<core::SandboxView>()> fn = [this, &id, keep] {
    return keep ? manager_->Pause(id, "freeze") : manager_->Stop(id);
  };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return E2bError(v.error());
  co_return NoContent();
}

// Connect (and the older resume): a paused sandbox runs again (`memory: false`, the SDK's
// onResume "reboot": it boots afresh with its files), a stopped one starts. `timeout`,
// when given, is its timeout from now, except that a running sandbox's is only ever moved
// later (E2B's rule: a connect never shortens a sandbox's life).
asio::awaitable<Response> Api::E2bConnect(Request& req) {
  auto j = ParseObject(req.body, {"timeout", "memory", "autoPause"});
  if (!j.ok()) co_return E2bError(j.error());
  auto t = GetInt(*j, "timeout");
  if (!t.ok()) co_return E2bError(t.error());
  auto memory = GetBool(*j, "memory", true);
  if (!memory.ok()) co_return E2bError(memory.error());
  // Checked before anything changes.
  if (*t && (**t < 1 || **t > manager_->max_ttl_seconds()))
    co_return E2bError(MakeError(Code::kInvalidArgument,
                                 "timeout must be between 1 and " + std::to_string(manager_->max_ttl_seconds())));
  std::string id = req.params["id"];
  auto cur = manager_->Get(id);
  if (!cur.ok()) co_return E2bError(cur.error());
  const bool resume_only = req.pattern == "/sandboxes/{id}/resume";
  if (resume_only && cur->rec.state == "running")
    co_return E2bError(MakeError(Code::kFailedPrecondition, "sandbox " + id + " is already running"));
  std::string state = cur->rec.state;
  int status = state == "running" ? 200 : 201;
  const bool reboot = !*memory;
  std::function<Result<core::SandboxView>()> fn = [this, &id, &state, reboot]() -> Result<core::SandboxView> {
    if (state == "paused" && reboot) {
      auto stopped = manager_->Stop(id);
      if (!stopped.ok()) return stopped.error();
      return manager_->Start(id);
    }
    if (state == "paused") return manager_->Resume(id);
    if (state == "stopped" || state == "error") return manager_->Start(id);
    return manager_->Get(id);
  };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return E2bError(v.error());
  const bool only_later = state == "running";
  if (*t && (!only_later || v->rec.expires_ms <= 0 || v->rec.expires_ms < manager_->now_ms() + **t * 1000)) {
    core::UpdateRequest u;
    u.ttl_seconds = **t;
    auto up = manager_->Update(id, u);
    if (!up.ok()) co_return E2bError(up.error());
  }
  co_return Json(status, E2bSandboxJson(*v));
}

}  // namespace sbx::api
