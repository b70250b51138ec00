// Api: parses and validates each route's input into typed requests, calls the manager,
// and renders its answer. No policy lives here. Any io thread; blocking manager calls run
// on the blocking pool.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_types.h"
#include "base/run_blocking.h"
#include "core/code_contexts.h"
#include "core/processes.h"
#include "api/file_ops.h"
#include "core/sandbox_manager.h"
#include "layers/images.h"

namespace sbx::api {

class Api;

// What a route's body is: none, a JSON object, raw bytes in memory, a large body that
// the server streams to a temporary file (req.body_file) before the handler runs (admin
// routes only), or one the handler reads as it arrives (req.body_source).
enum class Body { kNone, kJson, kRaw, kFile, kStream };
// Who may call a route: anyone, the admin key only, or the admin key and the token of
// the sandbox the route names ({id}).
// kE2bSandbox: the E2B data plane's routes, matched only for requests that carry
// E2b-Sandbox-Id, and allowed with that sandbox's access token (X-Access-Token).
enum class Access { kPublic, kAdmin, kOwnSandbox, kE2bSandbox };

struct RouteInfo {
  const char* method;
  const char* pattern;  // segments in braces are parameters
  Body body;
  Access access;
  // Decodes the request, makes one core call and renders its answer.
  boost::asio::awaitable<Response> (Api::*handler)(Request&);
  bool large_body() const { return body == Body::kFile; }
};

// The E2B-compatible routes (e2b_routes.cc): their errors are E2B's shape, and they take
// the key as X-API-KEY too.
bool IsE2bRoute(std::string_view pattern);
// The E2B data plane's routes (e2b_envd.cc).
bool IsEnvdRoute(const RouteInfo& r);
// An error as E2B's API answers it: {"code": HTTP status, "message"}.
Response E2bError(const Error& e);

// Every route the server answers; the OpenAPI document must list exactly these and
// ProxyRoutes().
const std::vector<RouteInfo>& Routes();
// The port proxy's routes as the OpenAPI document lists them (the proxy takes any method).
const std::vector<RouteInfo>& ProxyRoutes();

// Where a port-proxy request goes: the sandbox, its port, and the target to send it
// (path and query, still encoded).
struct ProxyTarget {
  std::string id;
  int port = 0;
  std::string target;
  bool by_host = false;  // routed by Host (a per-sandbox origin), not by the API's path
  // A signed port grant (`sbx_token`): from the query, which no longer holds it in
  // `target`, or, by host only, from the sbx_token cookie that a first answer set.
  std::string grant;
  bool grant_in_query = false;
  // The sbx_token cookies the request carries (by host only; a page may hold several,
  // one set by another page of the same site): any genuine one will do.
  std::vector<std::string> grant_cookies;
};
// The OpenAPI document served at /v1/openapi.json.
const std::string& OpenApiDocument();

class Api {
 public:
  Api(core::SandboxManager* manager, layers::ImageStore* images, disks::DiskStore* disks,
      std::string admin_key_hash, boost::asio::thread_pool* pool, std::string tmp_dir);
  ~Api();

  // The sandbox whose process is the peer of the unix socket `fd` (in-sandbox API).
  std::optional<std::string> SandboxOfPeer(int fd) const;
  // A request goes through these once each, in this order: Match finds the route for a
  // method and path and fills req.params (nullptr if none); Refusal gives the 401 or 403
  // answer if the request's credentials may not call `route` at all (checked before a
  // body is read, so that nobody unauthorised makes the daemon hold one), resolves the
  // names in its path to ids and marks a sandbox it names active; it sets req.admin and
  // req.token_sandbox. Handle then calls the route's handler.
  const RouteInfo* Match(Request& req) const;
  std::optional<Response> Refusal(const RouteInfo& route, Request& req) const;
  boost::asio::awaitable<Response> Handle(const RouteInfo& route, Request& req);
  const std::string& tmp_dir() const { return tmp_dir_; }

  // The port proxy. A request is for it if its path is /v1/sandboxes/{id}/ports/{port}/...
  // or its Host is {port}-{id}.{proxy domain}: then this answers the target, or the error
  // answer for a malformed one. nullopt for every other request.
  std::optional<Result<ProxyTarget>> ProxyRoute(const Request& req, std::string_view raw_target) const;
  // 401 unless some valid credentials (the admin key, a live sandbox's token, or the
  // in-sandbox socket) come with the request: checked before a malformed proxy target is
  // reported, as auth comes before validation everywhere.
  std::optional<Response> Unauthenticated(const Request& req) const;
  // 401/403 unless the admin key, that sandbox's own token or a valid grant for that port
  // (a signed URL) is presented.
  std::optional<Response> ProxyRefusal(const ProxyTarget& t, const Request& req) const;
  // The sandbox's agent for one proxied connection (a paused sandbox is resumed first).
  boost::asio::awaitable<Result<std::shared_ptr<core::AgentLease>>> ProxyLease(const std::string& id);
  void set_proxy_domain(std::string domain) { proxy_domain_ = std::move(domain); }
  // The Set-Cookie header line (with its CRLF) that keeps a by-host grant given in the
  // query for the page's next requests; "" when there is none to keep.
  std::string GrantCookie(const ProxyTarget& t) const;
  core::ProcessTable* processes() { return processes_.get(); }

 private:
  friend const std::vector<RouteInfo>& Routes();
  using Handler = boost::asio::awaitable<Response>;
  // admin_routes.cc
  Handler Health(Request& req);
  Handler OpenApi(Request& req);
  Handler Metrics(Request& req);
  Handler Usage(Request& req);
  Handler ListSecrets(Request& req);
  Handler SetSecret(Request& req);
  Handler DeleteSecret(Request& req);
  // sandbox_routes.cc
  Handler CreateSandbox(Request& req);
  Handler ListSandboxes(Request& req);
  Handler GetSandbox(Request& req);
  Handler SandboxStats(Request& req);
  Handler UpdateSandbox(Request& req);
  Handler SetNetwork(Request& req);
  Handler DeleteSandbox(Request& req);
  // proxy_routes.cc
  Handler CreatePortUrl(Request& req);
  Handler SetTimeout(Request& req);
  Handler StopSandbox(Request& req);
  Handler StartSandbox(Request& req);
  Handler PauseSandbox(Request& req);
  Handler ResumeSandbox(Request& req);
  Handler SnapshotSandbox(Request& req);
  Handler ForkSandbox(Request& req);
  // exec_routes.cc
  Handler ExecInSandbox(Request& req);
  // file_routes.cc: every files and archive route
  Handler Files(Request& req);
  // One file operation in sandbox `id`'s agent, begun (file_ops.h).
  boost::asio::awaitable<Result<FileOp>> StartFileOp(const std::string& id, nlohmann::json op);
  // process_routes.cc: every background-process route
  Handler Processes(Request& req);
  // code_routes.cc: the code interpreter's cells and contexts
  Handler RunCode(Request& req);
  Handler CodeContexts(Request& req);
  // template_routes.cc: named snapshots and images
  Handler ListSnapshots(Request& req);
  Handler GetSnapshot(Request& req);
  Handler DeleteSnapshot(Request& req);
  Handler ListImages(Request& req);
  Handler ImportImage(Request& req);
  Handler DeleteImage(Request& req);
  // disk_routes.cc
  Handler CreateDisk(Request& req);
  Handler ListDisks(Request& req);
  Handler GetDisk(Request& req);
  Handler DeleteDisk(Request& req);
  Handler ReadDiskFile(Request& req);
  Handler WriteDiskFile(Request& req);
  Handler DiskExec(Request& req);
  // e2b_routes.cc: the E2B-compatible control plane
  Handler E2bCreate(Request& req);
  Handler E2bList(Request& req);
  Handler E2bGet(Request& req);
  Handler E2bKill(Request& req);
  Handler E2bTimeout(Request& req);
  Handler E2bPause(Request& req);
  Handler E2bConnect(Request& req);
  // e2b_envd.cc: the E2B-compatible data plane
  Handler EnvdHealth(Request& req);
  Handler EnvdStart(Request& req);
  Handler EnvdSignal(Request& req);
  Handler EnvdList(Request& req);
  Handler EnvdConnect(Request& req);
  Handler EnvdInput(Request& req);
  Handler EnvdUpdate(Request& req);
  // e2b_files.cc: the E2B data plane's files
  Handler EnvdFilesystem(Request& req);
  Handler EnvdWatchDir(Request& req);
  Handler EnvdGetFile(Request& req);
  Handler EnvdPostFile(Request& req);
  // A sandbox as E2B's create and connect answer it (with its access token).
  nlohmann::json E2bSandboxJson(const core::SandboxView& v) const;
  // Who calls: the admin key, a sandbox's scoped token (for that sandbox), or nobody.
  struct Caller {
    enum Kind { kNone, kAdmin, kSandbox } kind = kNone;
    std::string sandbox;
  };
  Caller Authorize(const Request& req) const;
  // Turns the {id} of a sandbox or disk route into the id it names (routes.cc).
  Status ResolveRefs(Request& req, const Caller& caller) const;

  core::SandboxManager* manager_;
  layers::ImageStore* images_;
  disks::DiskStore* disks_;
  std::string admin_key_hash_;
  boost::asio::thread_pool* pool_;
  std::string tmp_dir_;
  std::string proxy_domain_ = "sbx.localhost";
  std::unique_ptr<core::ProcessTable> processes_;
  std::unique_ptr<core::CodeContexts> code_;
};

}  // namespace sbx::api
