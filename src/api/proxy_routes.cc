// The port proxy's routing and auth. The bytes themselves are piped by the server
// (server.cc) through a port-open connection to the sandbox's agent, which dials only the
// sandbox's own loopback.
#include <cctype>

#include "api/decode.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "base/ids.h"

namespace sbx::api {

namespace {

const std::vector<RouteInfo> kProxyRoutes = {
    {"GET", "/v1/sandboxes/{id}/ports/{port}/{path}", Body::kRaw, Access::kOwnSandbox, nullptr},
    {"POST", "/v1/sandboxes/{id}/ports/{port}/{path}", Body::kRaw, Access::kOwnSandbox, nullptr},
    {"PUT", "/v1/sandboxes/{id}/ports/{port}/{path}", Body::kRaw, Access::kOwnSandbox, nullptr},
    {"PATCH", "/v1/sandboxes/{id}/ports/{port}/{path}", Body::kRaw, Access::kOwnSandbox, nullptr},
    {"DELETE", "/v1/sandboxes/{id}/ports/{port}/{path}", Body::kRaw, Access::kOwnSandbox, nullptr},
};

Result<int> ParsePort(std::string_view s) {
  if (s.empty() || s.size() > 5) return MakeError(Code::kInvalidArgument, "the port must be a number from 1 to 65535");
  int v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return MakeError(Code::kInvalidArgument, "the port must be a number from 1 to 65535");
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > 65535) return MakeError(Code::kInvalidArgument, "the port must be a number from 1 to 65535");
  return v;
}

constexpr std::string_view kGrantParam = "sbx_token";

// Takes the sbx_token parameter out of the target's query (it is sbxd's, never the
// sandbox's) into t->grant; by host, without one there, the sbx_token cookie instead.
void TakeGrant(ProxyTarget* t, const Request& req) {
  size_t q = t->target.find('?');
  if (q != std::string::npos) {
    std::string kept;
    size_t start = q + 1;
    while (start <= t->target.size()) {
      size_t amp = t->target.find('&', start);
      if (amp == std::string::npos) amp = t->target.size();
      std::string_view part(t->target.data() + start, amp - start);
      if (part.substr(0, kGrantParam.size() + 1) == std::string(kGrantParam) + "=") {
        t->grant = PercentDecode(part.substr(kGrantParam.size() + 1), true);
        t->grant_in_query = true;
      } else if (!part.empty()) {
        kept += (kept.empty() ? "" : "&") + std::string(part);
      }
      start = amp + 1;
    }
    t->target = t->target.substr(0, q) + (kept.empty() ? "" : "?" + kept);
  }
  if (!t->grant.empty() || !t->by_host) return;
  // A cookie is sent by the browser on its own, also for requests that pages of other
  // sandboxes make (every PORT-ID.<domain> is the same site): it counts only for a
  // request from the page's own origin (a navigation, or the page's own fetches).
  std::string site = req.Header("sec-fetch-site"), origin = req.Header("origin");
  if (!site.empty() && site != "same-origin" && site != "none") return;
  if (!origin.empty() && origin != "http://" + req.Header("host") && origin != "https://" + req.Header("host")) return;
  std::string cookies = req.Header("cookie");
  for (std::string_view c : CookiePairs(cookies))
    if (c.substr(0, kGrantParam.size() + 1) == std::string(kGrantParam) + "=")
      t->grant_cookies.emplace_back(c.substr(kGrantParam.size() + 1));
}

}  // namespace

const std::vector<RouteInfo>& ProxyRoutes() { return kProxyRoutes; }

std::optional<Result<ProxyTarget>> Api::ProxyRoute(const Request& req, std::string_view raw_target) const {
  // By host: {port}-{id}.{domain}[:listen port].
  std::string host = req.Header("host");
  if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos)
    host.resize(colon);
  for (auto& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string suffix = "." + proxy_domain_;
  if (!proxy_domain_.empty() && host.size() > suffix.size() &&
      host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) {
    std::string label = host.substr(0, host.size() - suffix.size());
    size_t dash = label.find('-');
    if (dash == std::string::npos)
      return Result<ProxyTarget>(MakeError(Code::kInvalidArgument, "a proxy host is PORT-ID." + proxy_domain_));
    auto port = ParsePort(std::string_view(label).substr(0, dash));
    if (!port.ok()) return Result<ProxyTarget>(port.error());
    ProxyTarget t;
    t.id = label.substr(dash + 1);
    t.port = *port;
    t.target = std::string(raw_target);
    t.by_host = true;
    if (!ValidName(t.id)) return Result<ProxyTarget>(MakeError(Code::kInvalidArgument, "invalid sandbox id in the host"));
    if (t.target.empty() || t.target[0] != '/') t.target = "/" + t.target;
    TakeGrant(&t, req);
    return Result<ProxyTarget>(std::move(t));
  }
  // By path: /v1/sandboxes/{id}/ports/{port}[/rest][?query].
  const std::string_view prefix = "/v1/sandboxes/";
  if (raw_target.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view rest = raw_target.substr(prefix.size());
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string id = PercentDecode(rest.substr(0, slash), false);
  rest.remove_prefix(slash + 1);
  if (rest.substr(0, 6) != "ports/") return std::nullopt;
  rest.remove_prefix(6);
  size_t end = rest.find_first_of("/?");
  auto port = ParsePort(rest.substr(0, end));
  if (!ValidName(id)) return Result<ProxyTarget>(MakeError(Code::kInvalidArgument, "invalid id: ids and names match [a-z0-9][a-z0-9._-]{0,62}"));
  if (!port.ok()) return Result<ProxyTarget>(port.error());
  std::string target = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (target[0] == '?') target = "/" + target;
  ProxyTarget t;
  t.id = id;
  t.port = *port;
  t.target = target;
  TakeGrant(&t, req);
  return Result<ProxyTarget>(std::move(t));
}

std::optional<Response> Api::Unauthenticated(const Request& req) const {
  if (Authorize(req).kind != Caller::kNone) return std::nullopt;
  return ErrorResponse(Code::kUnauthenticated, "a valid API key or a sandbox's token is required (Authorization: Bearer ...)");
}

std::optional<Response> Api::ProxyRefusal(const ProxyTarget& t, const Request& req) const {
  Caller caller = Authorize(req);
  // A `public` sandbox's ports are open to anyone who reaches sbxd.
  if (caller.kind == Caller::kNone && manager_->PortsArePublic(t.id)) return std::nullopt;
  // A signed URL's grant opens that port of that sandbox only, until it expires.
  if (caller.kind == Caller::kNone && !t.grant.empty() && manager_->PortGrantValid(t.id, t.port, t.grant))
    return std::nullopt;
  if (caller.kind == Caller::kNone)
    for (const auto& g : t.grant_cookies)
      if (manager_->PortGrantValid(t.id, t.port, g)) return std::nullopt;
  if (caller.kind == Caller::kNone)
    return ErrorResponse(Code::kUnauthenticated, "a valid API key or this sandbox's token is required (Authorization: Bearer ...)");
  if (caller.kind == Caller::kSandbox && caller.sandbox != t.id)
    return ErrorResponse(Code::kPermissionDenied, "a sandbox token may only reach its own sandbox's ports");
  return std::nullopt;
}

std::string Api::GrantCookie(const ProxyTarget& t) const {
  // Only a genuine grant (whose expiry is then at most 12 digits) is kept.
  if (!t.by_host || !t.grant_in_query || !manager_->PortGrantValid(t.id, t.port, t.grant)) return "";
  int64_t expires = std::stoll(t.grant.substr(0, t.grant.find('.')));
  int64_t left = expires - NowUnixMs() / 1000;
  if (left <= 0) return "";
  // The host is the sandbox's port's own origin: the cookie goes back there only.
  // The page's URL holds the grant: browsers must not pass it on as a Referer.
  return "Set-Cookie: " + std::string(kGrantParam) + "=" + t.grant + "; Path=/; Max-Age=" + std::to_string(left) +
         "; HttpOnly; SameSite=Lax\r\nReferrer-Policy: no-referrer\r\n";
}

boost::asio::awaitable<Response> Api::CreatePortUrl(Request& req) {
  auto j = ParseObject(req.body, {"port", "ttl_seconds"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto port = GetInt(*j, "port");
  auto ttl = GetInt(*j, "ttl_seconds");
  if (!port.ok()) co_return ErrorResponse(port.error());
  if (!ttl.ok()) co_return ErrorResponse(ttl.error());
  if (!*port) co_return Bad("port is required");
  const std::string& id = req.params["id"];
  auto grant = manager_->GrantPort(id, static_cast<int>(std::clamp<int64_t>(**port, 0, 65536)), ttl->value_or(3600));
  if (!grant.ok()) co_return ErrorResponse(grant.error());
  // The URLs use the address the caller reached sbxd by (its Host header).
  std::string host = req.Header("host");
  std::string listen_port;
  if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos)
    listen_port = host.substr(colon);
  std::string p = std::to_string(**port);
  std::string query = "?" + std::string(kGrantParam) + "=" + grant->first;
  std::string path = "/v1/sandboxes/" + id + "/ports/" + p + "/" + query;
  co_return Json(201, {{"type", "port.url"},
                       {"id", id},
                       {"port", **port},
                       {"token", grant->first},
                       {"expires_at", FormatRfc3339(grant->second * 1000)},
                       {"path", path},
                       {"url", host.empty() ? nlohmann::json(nullptr) : nlohmann::json("http://" + host + path)},
                       {"host_url", proxy_domain_.empty() ? nlohmann::json(nullptr)
                                                          : nlohmann::json("http://" + p + "-" + id + "." + proxy_domain_ +
                                                                           listen_port + "/" + query)}});
}

boost::asio::awaitable<Result<std::shared_ptr<core::AgentLease>>> Api::ProxyLease(const std::string& id) {
  // Port traffic counts as activity for the idle policy (the lease marks it), and wakes
  // a paused sandbox.
  co_return co_await manager_->AcquireAgent(id);
}

}  // namespace sbx::api
