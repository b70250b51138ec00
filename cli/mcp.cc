// `sbx mcp`: the Model Context Protocol's JSON-RPC side (initialize, ping, tools/list,
// tools/call) over stdio (one message per line) or streamable HTTP (`--http HOST:PORT`,
// one endpoint `/mcp`). Each request runs on a thread of its own, so a long command does
// not hold up the others; answers are written whole, one at a time.
#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <list>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "base/ids.h"
#include "base/fs.h"
#include "commands.h"
#include "mcp.h"

namespace sbx::cli {
namespace {

using nlohmann::json;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// Protocol versions this server speaks, newest first (its tools use nothing that differs
// between them). A client asking for another gets the newest.
const char* const kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

bool KnownVersion(const std::string& v) {
  for (const char* k : kVersions)
    if (v == k) return true;
  return false;
}

json RpcError(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

json RpcResult(const json& id, json result) { return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; }

bool IsRequest(const json& m) { return m.is_object() && m.contains("method") && m.contains("id"); }

// A string member of `j`, or "" when it is missing or not a string (value() would throw).
std::string StrOf(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

// One JSON-RPC message: the response to a request, nullopt for a notification or a
// response (this server sends no requests, so it expects none back, and answers none).
std::optional<json> Handle(const Globals& g, const json& m) {
  if (m.is_object() && !m.contains("method") && (m.contains("result") || m.contains("error"))) return std::nullopt;
  if (!m.is_object() || StrOf(m, "jsonrpc") != "2.0" || (m.contains("method") && !m["method"].is_string()) ||
      (m.contains("id") && !m["id"].is_string() && !m["id"].is_number_integer()))
    return RpcError(m.is_object() && m.contains("id") ? m["id"] : json(), -32600, "not a JSON-RPC 2.0 message");
  if (!m.contains("method")) return RpcError(m.contains("id") ? m["id"] : json(), -32600, "no method");
  if (!m.contains("id")) return std::nullopt;  // notifications/initialized, cancelled...
  const json& id = m["id"];
  std::string method = m["method"];
  json params = m.contains("params") ? m["params"] : json::object();
  if (!params.is_object()) return RpcError(id, -32602, "params must be an object");
  if (method == "initialize") {
    std::string asked = StrOf(params, "protocolVersion");
    return RpcResult(id, {{"protocolVersion", KnownVersion(asked) ? asked : kVersions[0]},
                          {"capabilities", {{"tools", {{"listChanged", false}}}}},
                          {"serverInfo", {{"name", "sbx"}, {"title", "sbx sandboxes"}, {"version", SBX_VERSION}}},
                          {"instructions",
                           "Each tool works on sbx sandboxes: isolated Linux machines. run_command runs in a fresh "
                           "sandbox per call unless given a sandbox or a session name; run_on_disk keeps files on a "
                           "persistent disk between calls."}});
  }
  if (method == "ping") return RpcResult(id, json::object());
  if (method == "tools/list") return RpcResult(id, {{"tools", mcp::ToolList()}});
  if (method == "tools/call") {
    if (!params.contains("name") || !params["name"].is_string()) return RpcError(id, -32602, "name is required");
    json args = params.contains("arguments") ? params["arguments"] : json::object();
    if (auto r = mcp::CallTool(g, params["name"], args)) return RpcResult(id, std::move(*r));
    return RpcError(id, -32602, "unknown tool " + params["name"].get<std::string>());
  }
  return RpcError(id, -32601, "method not found: " + method);
}

// Handle, with whatever escapes it (it should be nothing) as an internal error: a message
// never ends the server.
std::optional<json> SafeHandle(const Globals& g, const json& m) {
  try {
    return Handle(g, m);
  } catch (const std::exception& e) {
    json id = m.is_object() && m.contains("id") && (m["id"].is_string() || m["id"].is_number_integer()) ? m["id"] : json();
    return RpcError(id, -32603, std::string("internal error: ") + e.what());
  }
}

// ---- stdio ----

int ServeStdio(const Globals& g) {
  std::mutex out_mu, mu;
  std::condition_variable cv;
  int running = 0;
  auto write = [&out_mu](const json& m) {
    std::string line = m.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    std::lock_guard<std::mutex> lock(out_mu);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  };
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json m = json::parse(line, nullptr, false);
    if (m.is_discarded()) {
      write(RpcError(nullptr, -32700, "parse error: not JSON"));
      continue;
    }
    if (!IsRequest(m)) {
      if (auto r = SafeHandle(g, m)) write(*r);
      continue;
    }
    {
      // At most 64 calls at once; the next line waits for one of them to end.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return running < 64; });
      ++running;
    }
    std::thread([&, m = std::move(m)] {
      if (auto r = SafeHandle(g, m)) write(*r);
      std::lock_guard<std::mutex> lock(mu);
      --running;
      cv.notify_all();
    }).detach();
  }
  // End of input: the calls under way are answered before the server exits.
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return running == 0; });
  return 0;
}

// ---- streamable HTTP ----

// A socket whose reads and writes wait at most until `deadline` (Asio's blocking calls
// ignore SO_RCVTIMEO: they poll without a timeout once the socket says EAGAIN).
struct TimedSocket {
  asio::ip::tcp::socket& s;
  std::chrono::steady_clock::time_point deadline;

  using executor_type = asio::ip::tcp::socket::executor_type;
  executor_type get_executor() { return s.get_executor(); }
  bool Wait(short events, beast::error_code& ec) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    struct pollfd p = {s.native_handle(), events, 0};
    int n;
    do {
      n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    } while (n < 0 && errno == EINTR);
    if (n <= 0) ec = asio::error::timed_out;
    return n > 0;
  }
  template <typename Buffers>
  size_t read_some(const Buffers& b, beast::error_code& ec) {
    return Wait(POLLIN, ec) ? s.read_some(b, ec) : 0;
  }
  template <typename Buffers>
  size_t read_some(const Buffers& b) {
    beast::error_code ec;
    size_t n = read_some(b, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
  template <typename Buffers>
  size_t write_some(const Buffers& b, beast::error_code& ec) {
    return Wait(POLLOUT, ec) ? s.write_some(b, ec) : 0;
  }
  template <typename Buffers>
  size_t write_some(const Buffers& b) {
    beast::error_code ec;
    size_t n = write_some(b, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
};

struct HttpServer {
  const Globals* g;
  std::string token;  // required as a bearer token when not empty
  std::mutex mu;
  std::set<std::string> sessions;
  // Open connections (past kMaxConnections a new one is closed at once), and those of
  // them that have not yet sent an authenticated request: past kMaxUnknown the oldest of
  // these is shut to make room, so that clients without the token can neither hold the
  // slots of those with it nor keep them from connecting.
  static constexpr int kMaxConnections = 256;
  static constexpr size_t kMaxUnknown = 32;
  static constexpr int kUnknownHeaderSeconds = 10;
  std::atomic<int> connections{0};
  std::mutex unknown_mu;
  std::list<std::pair<uint64_t, int>> unknown;  // (ticket, socket fd), oldest first
  uint64_t next_ticket = 1;

  // A new connection among the unknown ones (the oldest shut if they are too many).
  uint64_t AdmitUnknown(int fd) {
    std::lock_guard<std::mutex> lock(unknown_mu);
    if (unknown.size() >= kMaxUnknown) {
      ::shutdown(unknown.front().second, SHUT_RDWR);  // still open: it leaves the list first
      unknown.pop_front();
    }
    unknown.emplace_back(next_ticket, fd);
    return next_ticket++;
  }
  // It authenticated, or is about to be closed.
  void LeaveUnknown(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(unknown_mu);
    unknown.remove_if([ticket](const auto& e) { return e.first == ticket; });
  }

  // Compares without an early exit, so the time taken tells nothing of the token.
  static bool SameSecret(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
  }

  static bool LocalOrigin(const std::string& origin) {
    for (const char* host : {"http://localhost", "http://127.0.0.1", "http://[::1]", "https://localhost",
                             "https://127.0.0.1", "https://[::1]"}) {
      std::string h = host;
      if (origin == h || origin.rfind(h + ":", 0) == 0) return true;
    }
    return false;
  }

  // The refusal of a request whose header alone says it may not be served (wrong
  // endpoint, foreign origin, no valid token), before a byte of its body is read; the
  // connection then closes.
  std::optional<http::response<http::string_body>> Refuse(const http::request_header<>& req) const {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "sbx-mcp/" SBX_VERSION);
    res.keep_alive(false);
    auto fail = [&](http::status st, int code, const std::string& msg) {
      res.result(st);
      res.set(http::field::content_type, "application/json");
      res.body() = RpcError(nullptr, code, msg).dump();
      res.prepare_payload();
      return res;
    };
    std::string target(req.target());
    if (target != "/mcp" && target.rfind("/mcp?", 0) != 0) return fail(http::status::not_found, -32000, "the MCP endpoint is /mcp");
    // A page in a browser must not drive the sandboxes (DNS rebinding): only local origins.
    std::string origin(req[http::field::origin]);
    if (!origin.empty() && !LocalOrigin(origin)) return fail(http::status::forbidden, -32000, "origin not allowed: " + origin);
    if (!SameSecret(std::string(req[http::field::authorization]), "Bearer " + token)) {
      res.set(http::field::www_authenticate, "Bearer");
      return fail(http::status::unauthorized, -32000, "a valid bearer token is required");
    }
    return std::nullopt;
  }

  // Answers a request that Refuse let through.
  http::response<http::string_body> Answer(const http::request<http::string_body>& req) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "sbx-mcp/" SBX_VERSION);
    res.keep_alive(req.keep_alive());
    auto fail = [&](http::status st, int code, const std::string& msg) {
      res.result(st);
      res.set(http::field::content_type, "application/json");
      res.body() = RpcError(nullptr, code, msg).dump();
      res.prepare_payload();
      return res;
    };
    std::string session(req["mcp-session-id"]);
    if (req.method() == http::verb::delete_) {
      if (session.empty()) return fail(http::status::bad_request, -32000, "the Mcp-Session-Id header is required");
      std::lock_guard<std::mutex> lock(mu);
      if (!sessions.erase(session)) return fail(http::status::not_found, -32001, "no such session");
      res.result(http::status::no_content);
      res.prepare_payload();
      return res;
    }
    if (req.method() != http::verb::post) {
      // No server-initiated messages: there is no stream to open with GET.
      res.result(http::status::method_not_allowed);
      res.set(http::field::allow, "POST, DELETE");
      res.prepare_payload();
      return res;
    }
    std::string accept(req[http::field::accept]);
    if (!accept.empty() && accept.find("application/json") == std::string::npos && accept.find("*/*") == std::string::npos)
      return fail(http::status::not_acceptable, -32000, "the client must accept application/json");
    std::string version(req["mcp-protocol-version"]);
    if (!version.empty() && !KnownVersion(version))
      return fail(http::status::bad_request, -32000, "unsupported MCP-Protocol-Version " + version);
    json body = json::parse(req.body(), nullptr, false);
    if (body.is_discarded()) return fail(http::status::bad_request, -32700, "parse error: not JSON");
    json messages = body.is_array() ? body : json::array({body});
    if (messages.empty()) return fail(http::status::bad_request, -32600, "an empty batch");
    bool init = false;
    for (const auto& m : messages) init = init || StrOf(m, "method") == "initialize";
    if (init) {
      if (messages.size() != 1) return fail(http::status::bad_request, -32600, "initialize must be sent alone");
      session = RandomHex(16);
      std::lock_guard<std::mutex> lock(mu);
      if (sessions.size() >= 4096) return fail(http::status::service_unavailable, -32000, "too many sessions");
      sessions.insert(session);
      res.set("Mcp-Session-Id", session);
    } else {
      if (session.empty()) return fail(http::status::bad_request, -32000, "the Mcp-Session-Id header is required");
      std::lock_guard<std::mutex> lock(mu);
      if (!sessions.count(session)) return fail(http::status::not_found, -32001, "no such session");
    }
    json out = json::array();
    for (const auto& m : messages)
      if (auto r = SafeHandle(*g, m)) out.push_back(std::move(*r));
    if (out.empty()) {
      res.result(http::status::accepted);
      res.prepare_payload();
      return res;
    }
    res.set(http::field::content_type, "application/json");
    res.body() = (body.is_array() ? out : out[0]).dump(-1, ' ', false, json::error_handler_t::replace);
    res.prepare_payload();
    return res;
  }

  void Serve(asio::ip::tcp::socket sock, uint64_t ticket) {
    // A request (from the end of the one before) must come whole within 5 minutes, and
    // its answer be taken within as long, so that no client holds a thread for ever.
    // Until its first request is authenticated a connection counts among the few that
    // may be unknown, and has 10 s for each header; the body is read only after it.
    TimedSocket timed{sock, {}};
    beast::flat_buffer buf;
    beast::error_code ec;
    bool authenticated = false;
    while (true) {
      http::request_parser<http::empty_body> hp;
      hp.header_limit(16 << 10);
      // The body's own limit is set once its header is let in (not boost::none: Beast 1.74
      // then takes any declared length as over the limit).
      hp.body_limit(std::numeric_limits<std::uint64_t>::max());
      timed.deadline = std::chrono::steady_clock::now() +
                       (authenticated ? std::chrono::seconds(300) : std::chrono::seconds(kUnknownHeaderSeconds));
      http::read_header(timed, buf, hp, ec);
      if (ec) break;
      if (auto refused = Refuse(hp.get())) {
        timed.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kUnknownHeaderSeconds);
        http::write(timed, *refused, ec);
        break;
      }
      if (!authenticated) {
        authenticated = true;
        LeaveUnknown(ticket);
      }
      http::request_parser<http::string_body> p{std::move(hp)};
      p.body_limit(16 << 20);
      timed.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
      http::read(timed, buf, p, ec);
      if (ec) break;
      http::response<http::string_body> res;
      try {
        res = Answer(p.get());
      } catch (const std::exception& e) {
        res = {http::status::internal_server_error, p.get().version()};
        res.set(http::field::content_type, "application/json");
        res.body() = RpcError(nullptr, -32603, std::string("internal error: ") + e.what()).dump();
        res.prepare_payload();
      }
      timed.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
      http::write(timed, res, ec);
      if (ec || !res.keep_alive()) break;
    }
    if (!authenticated) LeaveUnknown(ticket);
    sock.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  }
};

int ServeHttp(const Globals& g, const std::string& listen, std::string token) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Usage("--http takes HOST:PORT (127.0.0.1:8931)");
  std::string host = listen.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  asio::io_context io;
  beast::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return Usage("--http: " + host + " is not an IP address");
  if (!addr.is_loopback() && token.empty())
    return Usage("--http on a non-loopback address needs a token (--token-file or SBX_MCP_TOKEN): it runs commands with sbx's key");
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) return Usage("--http: bad port in " + listen);
  asio::ip::tcp::acceptor acc(io);
  asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Fail("cannot listen on " + listen + ": " + ec.message());
  auto bound = acc.local_endpoint();
  std::fprintf(stderr, "sbx mcp: streamable HTTP on http://%s:%u/mcp\n", listen.substr(0, colon).c_str(), bound.port());
  // Every client needs the token: whoever reaches the port acts with sbx's admin key
  // (another user of this host, say). Without one given, one is made and shown once.
  if (token.empty()) {
    token = RandomHex(16);
    std::fprintf(stderr, "sbx mcp: clients send \"Authorization: Bearer %s\" (set SBX_MCP_TOKEN or --token-file "
                         "to choose it)\n", token.c_str());
  }
  std::fflush(stderr);
  auto server = std::make_shared<HttpServer>();
  server->g = &g;
  server->token = token;
  while (true) {
    asio::ip::tcp::socket sock(io);
    acc.accept(sock, ec);
    if (ec) continue;
    if (server->connections.load() >= HttpServer::kMaxConnections) continue;  // at the cap: closed at once
    ++server->connections;
    const uint64_t ticket = server->AdmitUnknown(sock.native_handle());
    std::thread([server, ticket, s = std::move(sock)]() mutable {
      server->Serve(std::move(s), ticket);
      --server->connections;
    }).detach();
  }
}

struct McpCommand {
  CLI::App* cmd = nullptr;
  std::string http_listen, token_file, network;
  bool env = false;

  void Add(CLI::App& app) {
    cmd = app.add_subcommand("mcp", "Serve sbx's tools over the Model Context Protocol (stdio, or HTTP with --http)");
    cmd->add_option("--http", http_listen,
                    "serve streamable HTTP on HOST:PORT (endpoint /mcp) instead of stdio; port 0 picks one");
    cmd->add_option("--token-file", token_file,
                    "with --http: the token clients must send as a bearer token (also SBX_MCP_TOKEN; "
                    "without either, one is made and printed on stderr)");
    cmd->add_option("--network", network,
                    "the network of the sandboxes the tools make: none (whatever a call asks), or outbound "
                    "(unless a call asks none); default: sbxd's default")
        ->check(CLI::IsMember({"none", "outbound"}));
    cmd->add_flag("--env", env,
                  "give the sandboxes the tools make sbxd's secrets as environment variables (by default "
                  "they are made no_env)");
    cmd->footer(
        "Example: claude mcp add sbx -- sbx mcp\n"
        "         sbx mcp --http 127.0.0.1:8931");
  }

  std::optional<int> Run(HttpClient&, const Globals& g) {
    if (!cmd->parsed()) return std::nullopt;
    mcp::SetSandboxPolicy({env, network});
    if (http_listen.empty()) return ServeStdio(g);
    std::string token;
    if (const char* t = std::getenv("SBX_MCP_TOKEN"); t && *t) token = t;
    if (!token_file.empty()) {
      auto f = fs::ReadFile(token_file, 4096);
      if (!f.ok()) return Fail("cannot read " + token_file + ": " + f.error().message);
      token = *f;
      while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
      if (token.empty()) return Fail(token_file + " is empty");
    }
    return ServeHttp(g, http_listen, token);
  }
};

}  // namespace

Runner AddMcpCommand(CLI::App& app) { return Register<McpCommand>(app); }

}  // namespace sbx::cli
