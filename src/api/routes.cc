// The route table (the one list of routes: the router, the auth check and the OpenAPI
// test read it), matching, authorization, and the dispatch to a route's handler.
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "base/ids.h"
#include "base/log.h"

namespace sbx::api {

namespace asio = boost::asio;

const std::vector<RouteInfo>& Routes() {
  static const std::vector<RouteInfo> kRoutes = {
      {"GET", "/v1/health",                                 Body::kNone, Access::kPublic, &Api::Health},
      {"GET", "/v1/openapi.json",                           Body::kNone, Access::kPublic, &Api::OpenApi},
      {"GET", "/metrics",                                   Body::kNone, Access::kAdmin, &Api::Metrics},
      {"POST", "/v1/sandboxes",                             Body::kJson, Access::kAdmin, &Api::CreateSandbox},
      {"GET", "/v1/sandboxes",                              Body::kNone, Access::kAdmin, &Api::ListSandboxes},
      {"GET", "/v1/sandboxes/{id}",                         Body::kNone, Access::kOwnSandbox, &Api::GetSandbox},
      {"GET", "/v1/sandboxes/{id}/stats",                   Body::kNone, Access::kOwnSandbox, &Api::SandboxStats},
      {"DELETE", "/v1/sandboxes/{id}",                      Body::kNone, Access::kAdmin, &Api::DeleteSandbox},
      {"PATCH", "/v1/sandboxes/{id}",                       Body::kJson, Access::kAdmin, &Api::UpdateSandbox},
      {"PATCH", "/v1/sandboxes/{id}/network",               Body::kJson, Access::kAdmin, &Api::SetNetwork},
      {"POST", "/v1/sandboxes/{id}/port-urls",              Body::kJson, Access::kAdmin, &Api::CreatePortUrl},
      {"POST", "/v1/sandboxes/{id}/exec",                   Body::kJson, Access::kAdmin, &Api::ExecInSandbox},
      {"POST", "/v1/sandboxes/{id}/stop",                   Body::kJson, Access::kAdmin, &Api::StopSandbox},
      {"POST", "/v1/sandboxes/{id}/start",                  Body::kJson, Access::kAdmin, &Api::StartSandbox},
      {"POST", "/v1/sandboxes/{id}/pause",                  Body::kJson, Access::kAdmin, &Api::PauseSandbox},
      {"POST", "/v1/sandboxes/{id}/resume",                 Body::kJson, Access::kAdmin, &Api::ResumeSandbox},
      {"POST", "/v1/sandboxes/{id}/timeout",                Body::kJson, Access::kAdmin, &Api::SetTimeout},
      {"POST", "/v1/sandboxes/{id}/snapshot",               Body::kJson, Access::kAdmin, &Api::SnapshotSandbox},
      {"POST", "/v1/sandboxes/{id}/fork",                   Body::kJson, Access::kAdmin, &Api::ForkSandbox},
      {"GET", "/v1/sandboxes/{id}/files",                   Body::kNone, Access::kAdmin, &Api::Files},
      {"PUT", "/v1/sandboxes/{id}/files",                   Body::kFile, Access::kAdmin, &Api::Files},
      {"DELETE", "/v1/sandboxes/{id}/files",                Body::kNone, Access::kAdmin, &Api::Files},
      {"GET", "/v1/sandboxes/{id}/files/list",              Body::kNone, Access::kAdmin, &Api::Files},
      {"GET", "/v1/sandboxes/{id}/files/stat",              Body::kNone, Access::kAdmin, &Api::Files},
      {"GET", "/v1/sandboxes/{id}/files/watch",             Body::kNone, Access::kAdmin, &Api::Files},
      {"POST", "/v1/sandboxes/{id}/files/mkdir",            Body::kJson, Access::kAdmin, &Api::Files},
      {"POST", "/v1/sandboxes/{id}/files/move",             Body::kJson, Access::kAdmin, &Api::Files},
      {"GET", "/v1/sandboxes/{id}/archive",                 Body::kNone, Access::kAdmin, &Api::Files},
      {"PUT", "/v1/sandboxes/{id}/archive",                 Body::kFile, Access::kAdmin, &Api::Files},
      {"POST", "/v1/sandboxes/{id}/processes",              Body::kJson, Access::kAdmin, &Api::Processes},
      {"GET", "/v1/sandboxes/{id}/processes",               Body::kNone, Access::kAdmin, &Api::Processes},
      {"GET", "/v1/sandboxes/{id}/processes/{pid}",         Body::kNone, Access::kAdmin, &Api::Processes},
      {"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", Body::kJson, Access::kAdmin, &Api::Processes},
      {"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin",  Body::kRaw, Access::kAdmin, &Api::Processes},
      {"GET", "/v1/sandboxes/{id}/processes/{pid}/output",  Body::kNone, Access::kAdmin, &Api::Processes},
      {"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", Body::kJson, Access::kAdmin, &Api::Processes},
      {"GET", "/v1/sandboxes/{id}/processes/{pid}/tty",     Body::kNone, Access::kAdmin, &Api::Processes},
      {"POST", "/v1/sandboxes/{id}/code",                   Body::kJson, Access::kAdmin, &Api::RunCode},
      {"POST", "/v1/sandboxes/{id}/code/contexts",          Body::kJson, Access::kAdmin, &Api::CodeContexts},
      {"GET", "/v1/sandboxes/{id}/code/contexts",           Body::kNone, Access::kAdmin, &Api::CodeContexts},
      {"POST", "/v1/sandboxes/{id}/code/contexts/{ctx}/restart", Body::kJson, Access::kAdmin, &Api::CodeContexts},
      {"DELETE", "/v1/sandboxes/{id}/code/contexts/{ctx}",  Body::kNone, Access::kAdmin, &Api::CodeContexts},
      {"GET", "/v1/snapshots",                              Body::kNone, Access::kAdmin, &Api::ListSnapshots},
      {"GET", "/v1/snapshots/{name}",                       Body::kNone, Access::kAdmin, &Api::GetSnapshot},
      {"DELETE", "/v1/snapshots/{name}",                    Body::kNone, Access::kAdmin, &Api::DeleteSnapshot},
      {"POST", "/v1/disks",                                 Body::kJson, Access::kAdmin, &Api::CreateDisk},
      {"GET", "/v1/disks",                                  Body::kNone, Access::kAdmin, &Api::ListDisks},
      {"GET", "/v1/disks/{id}",                             Body::kNone, Access::kAdmin, &Api::GetDisk},
      {"DELETE", "/v1/disks/{id}",                          Body::kNone, Access::kAdmin, &Api::DeleteDisk},
      {"POST", "/v1/disks/{id}/exec",                       Body::kJson, Access::kAdmin, &Api::DiskExec},
      {"GET", "/v1/disks/{id}/files",                       Body::kNone, Access::kAdmin, &Api::ReadDiskFile},
      {"PUT", "/v1/disks/{id}/files",                       Body::kRaw, Access::kAdmin, &Api::WriteDiskFile},
      {"GET", "/v1/usage",                                  Body::kNone, Access::kAdmin, &Api::Usage},
      {"GET", "/v1/secrets",                                Body::kNone, Access::kAdmin, &Api::ListSecrets},
      {"PUT", "/v1/secrets/{name}",                         Body::kJson, Access::kAdmin, &Api::SetSecret},
      {"DELETE", "/v1/secrets/{name}",                      Body::kNone, Access::kAdmin, &Api::DeleteSecret},
      {"GET", "/v1/images",                                 Body::kNone, Access::kAdmin, &Api::ListImages},
      {"POST", "/v1/images/{name}",                         Body::kFile, Access::kAdmin, &Api::ImportImage},
      {"DELETE", "/v1/images/{name}",                       Body::kNone, Access::kAdmin, &Api::DeleteImage},
      // E2B's API, as its SDKs call it (e2b_routes.cc).
      {"POST", "/v2/sandboxes",                             Body::kJson, Access::kAdmin, &Api::E2bCreate},
      {"POST", "/sandboxes",                                Body::kJson, Access::kAdmin, &Api::E2bCreate},
      {"GET", "/v2/sandboxes",                              Body::kNone, Access::kAdmin, &Api::E2bList},
      {"GET", "/sandboxes",                                 Body::kNone, Access::kAdmin, &Api::E2bList},
      {"GET", "/sandboxes/{id}",                            Body::kNone, Access::kAdmin, &Api::E2bGet},
      {"DELETE", "/sandboxes/{id}",                         Body::kNone, Access::kAdmin, &Api::E2bKill},
      {"POST", "/sandboxes/{id}/timeout",                   Body::kJson, Access::kAdmin, &Api::E2bTimeout},
      {"POST", "/sandboxes/{id}/pause",                     Body::kJson, Access::kAdmin, &Api::E2bPause},
      {"POST", "/sandboxes/{id}/resume",                    Body::kJson, Access::kAdmin, &Api::E2bConnect},
      {"POST", "/sandboxes/{id}/connect",                   Body::kJson, Access::kAdmin, &Api::E2bConnect},
      {"POST", "/v2/sandboxes/{id}/connect",                Body::kJson, Access::kAdmin, &Api::E2bConnect},
      // E2B's data plane, for requests that carry E2b-Sandbox-Id (e2b_envd.cc).
      {"GET", "/health",                                    Body::kNone, Access::kE2bSandbox, &Api::EnvdHealth},
      {"POST", "/process.Process/Start",                    Body::kRaw, Access::kE2bSandbox, &Api::EnvdStart},
      {"POST", "/process.Process/SendSignal",               Body::kJson, Access::kE2bSandbox, &Api::EnvdSignal},
      {"POST", "/process.Process/List",                     Body::kJson, Access::kE2bSandbox, &Api::EnvdList},
      {"POST", "/process.Process/Connect",                  Body::kRaw, Access::kE2bSandbox, &Api::EnvdConnect},
      {"POST", "/process.Process/SendInput",                Body::kJson, Access::kE2bSandbox, &Api::EnvdInput},
      {"POST", "/process.Process/CloseStdin",               Body::kJson, Access::kE2bSandbox, &Api::EnvdInput},
      {"POST", "/process.Process/Update",                   Body::kJson, Access::kE2bSandbox, &Api::EnvdUpdate},
      {"POST", "/filesystem.Filesystem/Stat",               Body::kJson, Access::kE2bSandbox, &Api::EnvdFilesystem},
      {"POST", "/filesystem.Filesystem/ListDir",            Body::kJson, Access::kE2bSandbox, &Api::EnvdFilesystem},
      {"POST", "/filesystem.Filesystem/MakeDir",            Body::kJson, Access::kE2bSandbox, &Api::EnvdFilesystem},
      {"POST", "/filesystem.Filesystem/Move",               Body::kJson, Access::kE2bSandbox, &Api::EnvdFilesystem},
      {"POST", "/filesystem.Filesystem/Remove",             Body::kJson, Access::kE2bSandbox, &Api::EnvdFilesystem},
      {"POST", "/filesystem.Filesystem/WatchDir",           Body::kRaw, Access::kE2bSandbox, &Api::EnvdWatchDir},
      {"GET", "/files",                                     Body::kNone, Access::kE2bSandbox, &Api::EnvdGetFile},
      {"POST", "/files",                                    Body::kStream, Access::kE2bSandbox, &Api::EnvdPostFile},
  };
  return kRoutes;
}

namespace {

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream ss(path);
  std::string seg;
  while (std::getline(ss, seg, '/'))
    if (!seg.empty()) out.push_back(PercentDecode(seg, false));
  return out;
}

}  // namespace

Api::Api(core::SandboxManager* manager, layers::ImageStore* images, disks::DiskStore* disks,
         std::string admin_key_hash, asio::thread_pool* pool, std::string tmp_dir)
    : manager_(manager), images_(images), disks_(disks), admin_key_hash_(std::move(admin_key_hash)),
      pool_(pool), tmp_dir_(std::move(tmp_dir)), processes_(std::make_unique<core::ProcessTable>(manager)),
      code_(std::make_unique<core::CodeContexts>(manager, processes_.get())) {}

Api::~Api() = default;

std::optional<std::string> Api::SandboxOfPeer(int fd) const { return manager_->SandboxOfPeer(fd); }

const RouteInfo* Api::Match(Request& req) const {
  auto segs = Split(req.path);
  const bool envd = !req.Header("e2b-sandbox-id").empty();
  for (const auto& r : Routes()) {
    if (req.method != r.method || IsEnvdRoute(r) != envd) continue;
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
      req.pattern = r.pattern;
      return &r;
    }
  }
  return nullptr;
}

Api::Caller Api::Authorize(const Request& req) const {
  if (!req.via_sandbox.empty()) return {Caller::kSandbox, req.via_sandbox};
  std::string h = req.Header("authorization");
  const std::string prefix = "Bearer ";
  std::string presented;
  if (h.size() > prefix.size() && h.compare(0, prefix.size(), prefix) == 0) presented = h.substr(prefix.size());
  // E2B's SDKs send the key as X-API-KEY: taken on their routes only, so that nothing
  // else (the port proxy forwards what it does not know) learns to carry it.
  else if (h.empty() && IsE2bRoute(req.pattern)) presented = req.Header("x-api-key");
  if (presented.empty()) return {};
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

Status Api::ResolveRefs(Request& req, const Caller& caller) const {
  auto ref = req.params.find("id");
  if (ref == req.params.end()) return OkStatus();
  Result<std::string> id = MakeError(Code::kNotFound, "");
  // Any API call on a sandbox is activity for its idle policy (not a stats reading:
  // `sbx stats` polls every sandbox each second).
  const bool on_sandbox = req.pattern.rfind("/v1/sandboxes/{id}", 0) == 0;
  const bool active = on_sandbox && req.pattern != "/v1/sandboxes/{id}/stats";
  if (caller.kind == Caller::kSandbox) {
    // A sandbox's token names its own sandbox by id or name only.
    ref->second = manager_->ResolveOwnSandbox(caller.sandbox, ref->second, active);
    return OkStatus();
  }
  if (on_sandbox || IsE2bRoute(req.pattern))
    id = manager_->ResolveSandbox(ref->second, active);
  else if (req.pattern.rfind("/v1/disks/{id}", 0) == 0 && disks_ != nullptr) id = disks_->Resolve(ref->second);
  else return OkStatus();
  if (id.ok()) {
    ref->second = *id;
    return OkStatus();
  }
  // Not found: the handler answers 404 naming what was asked for.
  if (id.error().code == Code::kNotFound) return OkStatus();
  return id.error();
}

std::optional<Response> Api::Refusal(const RouteInfo& route, Request& req) const {
  if (route.access == Access::kPublic) return std::nullopt;
  if (route.access == Access::kE2bSandbox) {
    // The token first (it is an HMAC of the id): nobody without it learns whether the
    // sandbox exists. One that is gone answers 502, as E2B's proxy does.
    std::string id = req.Header("e2b-sandbox-id");
    if (!ValidName(id) || !manager_->secrets().CheckAccessToken(id, req.Header("x-access-token")))
      return E2bError(MakeError(Code::kUnauthenticated, "a valid X-Access-Token for sandbox " +
                                                            (ValidName(id) ? id : std::string("?")) + " is required"));
    if (!manager_->MarkActive(id))  // the call is activity for its idle policy
      return Json(502, {{"code", 502}, {"message", "sandbox " + id + " was not found"}, {"sandboxId", id}});
    req.params["id"] = id;
    if (req.via_sandbox.empty()) req.token_sandbox = id;
    return std::nullopt;
  }
  auto refuse = [&](const Error& e) { return IsE2bRoute(route.pattern) ? E2bError(e) : ErrorResponse(e); };
  Caller caller = Authorize(req);
  req.admin = caller.kind == Caller::kAdmin;
  if (caller.kind == Caller::kNone)
    return refuse(MakeError(Code::kUnauthenticated, IsE2bRoute(route.pattern)
                                                        ? "a valid API key is required (X-API-KEY: KEY)"
                                                        : "a valid API key is required (Authorization: Bearer KEY)"));
  // An id, a name or a unique prefix of an id names a sandbox or a disk: the handlers
  // (and the check below) see its id.
  if (Status st = ResolveRefs(req, caller); !st.ok()) return refuse(st.error());
  if (caller.kind == Caller::kSandbox) {
    // A sandbox's token reads that sandbox and nothing else: it creates, execs and
    // deletes nothing.
    bool own = route.access == Access::kOwnSandbox && req.params["id"] == caller.sandbox;
    if (!own) return refuse(MakeError(Code::kPermissionDenied, "a sandbox token may only read its own sandbox"));
    if (req.via_sandbox.empty()) req.token_sandbox = caller.sandbox;
  }
  return std::nullopt;
}

asio::awaitable<Response> Api::Handle(const RouteInfo& route, Request& req) {
  const std::string& pat = route.pattern;
  for (const auto& [k, v] : req.params) {
    if (pat.rfind("/v1/secrets/", 0) == 0) continue;  // environment names; checked by the manager
    if (!ValidName(v)) {
      auto e = MakeError(Code::kInvalidArgument, "invalid " + k + ": ids and names match [a-z0-9][a-z0-9._-]{0,62}");
      co_return IsE2bRoute(pat) ? E2bError(e) : ErrorResponse(e);
    }
  }
  try {
    co_return co_await (this->*route.handler)(req);
  } catch (const std::exception& e) {
    SBX_LOG(kError) << "handler for " << req.method << " " << req.path << " threw: " << e.what();
    auto internal = MakeError(Code::kInternal, "internal error");
    co_return IsE2bRoute(pat) ? E2bError(internal) : ErrorResponse(internal);
  }
}

}  // namespace sbx::api
