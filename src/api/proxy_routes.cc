// The port proxy's routing and auth. The bytes themselves are piped by the server
// (server.cc) through a port-open connection to the sandbox's agent, which dials only the
// sandbox's own loopback.
#include <cctype>

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
    ProxyTarget t{label.substr(dash + 1), *port, std::string(raw_target), true};
    if (!ValidName(t.id)) return Result<ProxyTarget>(MakeError(Code::kInvalidArgument, "invalid sandbox id in the host"));
    if (t.target.empty() || t.target[0] != '/') t.target = "/" + t.target;
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
  return Result<ProxyTarget>(ProxyTarget{id, *port, target});
}

std::optional<Response> Api::Unauthenticated(const Request& req) const {
  if (Authorize(req).kind != Caller::kNone) return std::nullopt;
  return ErrorResponse(Code::kUnauthenticated, "a valid API key or a sandbox's token is required (Authorization: Bearer ...)");
}

std::optional<Response> Api::ProxyRefusal(const ProxyTarget& t, const Request& req) const {
  Caller caller = Authorize(req);
  // A `public` sandbox's ports are open to anyone who reaches sbxd.
  if (caller.kind == Caller::kNone && manager_->PortsArePublic(t.id)) return std::nullopt;
  if (caller.kind == Caller::kNone)
    return ErrorResponse(Code::kUnauthenticated, "a valid API key or this sandbox's token is required (Authorization: Bearer ...)");
  if (caller.kind == Caller::kSandbox && caller.sandbox != t.id)
    return ErrorResponse(Code::kPermissionDenied, "a sandbox token may only reach its own sandbox's ports");
  return std::nullopt;
}

boost::asio::awaitable<Result<std::shared_ptr<core::AgentLease>>> Api::ProxyLease(const std::string& id) {
  // Port traffic counts as activity for the idle policy, and wakes a paused sandbox.
  manager_->Touch(id);
  co_return co_await manager_->AcquireAgent(id);
}

}  // namespace sbx::api
