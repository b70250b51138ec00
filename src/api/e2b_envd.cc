// The E2B-compatible data plane (E2B calls its in-sandbox daemon "envd"): requests that
// carry E2b-Sandbox-Id go to that sandbox, authorised by its access token (X-Access-Token,
// routes.cc). Commands are sbx's background processes (core::ProcessTable), streamed as
// Connect-RPC server streams with JSON messages. docs/e2b.md has the mapping.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "api/e2b_connect.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "base/base64.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// The process events of a Start stream, each in its envelope.
std::string StartEvent(int64_t pid) { return Envelope(0, {{"event", {{"start", {{"pid", pid}}}}}}); }

// A terminal's output is one stream, `pty`.
std::string DataEvent(int stream, bool tty, const std::string& data) {
  const char* key = tty ? "pty" : stream == 1 ? "stdout" : "stderr";
  return Envelope(0, {{"event", {{"data", {{key, Base64Encode(data)}}}}}});
}

std::string KeepaliveEvent() { return Envelope(0, {{"event", {{"keepalive", json::object()}}}}); }

// Its status as envd words it (Go's): "exit status 3", "signal: killed"; a command that
// failed carries it as its error too (the SDK's CommandExitError message).
std::string EndEvent(const core::ProcessInfo& i) {
  std::string status = "unknown";
  if (i.exit_code) status = "exit status " + std::to_string(*i.exit_code);
  else if (i.signal == SIGKILL) status = "signal: killed";
  else if (i.signal == SIGTERM) status = "signal: terminated";
  else if (i.signal) status = "signal: " + std::to_string(i.signal);
  json end = {{"exited", i.exit_code.has_value()}, {"exitCode", i.exit_code ? *i.exit_code : -1}, {"status", status}};
  if (!i.error.empty()) end["error"] = i.error;
  else if (!i.exit_code || *i.exit_code != 0) end["error"] = status;
  return Envelope(0, {{"event", {{"end", end}}}});
}

// The pid of a request's process selector ({"process": {"pid"}}; tags are not kept).
Result<int64_t> PidOf(const json& j) {
  const json* pid = nullptr;
  if (j.contains("process") && j["process"].is_object() && j["process"].contains("pid")) pid = &j["process"]["pid"];
  int64_t n = 0;
  if (pid && pid->is_number_integer()) n = pid->get<int64_t>();
  else if (pid && pid->is_string() && !pid->get<std::string>().empty() && pid->get<std::string>().size() < 10 &&
           pid->get<std::string>().find_first_not_of("0123456789") == std::string::npos)
    n = std::stoll(pid->get<std::string>());
  if (n <= 0) return MakeError(Code::kInvalidArgument, "process.pid is required (tags are not supported)");
  return n;
}

// A pty's size ({"size": {"cols", "rows"}}), 1 to 1000 each.
Result<std::pair<int, int>> PtySize(const json& pty) {
  const json size = pty.is_object() ? pty.value("size", json::object()) : json();
  auto dim = [&](const char* k) -> int {
    return size.is_object() && size.contains(k) && size[k].is_number_integer() ? size[k].get<int>() : 0;
  };
  const int cols = dim("cols"), rows = dim("rows");
  if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000)
    return MakeError(Code::kInvalidArgument, "pty.size needs cols and rows between 1 and 1000");
  return std::make_pair(cols, rows);
}

// not_found unless `pid` is a command of the sandbox that still runs.
Status RequireRunning(core::ProcessTable* table, const std::string& id, int64_t pid) {
  if (auto info = table->Get(id, pid); !info.ok() || !info->running)
    return MakeError(Code::kNotFound, "no running process " + std::to_string(pid));
  return OkStatus();
}

// Connect-Timeout-Ms (0 when none is given).
Result<int64_t> TimeoutMs(const Request& req) {
  std::string t = req.Header("connect-timeout-ms");
  if (t.empty()) return int64_t{0};
  if (t.size() > 10 || t.find_first_not_of("0123456789") != std::string::npos)
    return MakeError(Code::kInvalidArgument, "Connect-Timeout-Ms must be a number of milliseconds");
  return std::stoll(t);
}

// A command's stream, as Start and Connect answer: its start (pid), its output from chunk
// `since` on (base64), and its end, with keep-alives while quiet. When `deadline_ms` (the
// call's Connect-Timeout-Ms) passes, the stream ends with deadline_exceeded, and with
// `kill_at_deadline` (Start: E2B's timeoutMs) the command is killed too.
Response CommandStream(core::ProcessTable* table, std::string id, int64_t pid, int64_t keepalive_ms,
                       int64_t deadline_ms, uint64_t since, bool kill_at_deadline) {
  Response r;
  r.content_type = "application/connect+json";
  auto deadline = deadline_ms > 0 ? std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms)
                                  : std::chrono::steady_clock::time_point::max();
  r.stream = [table, id, pid, keepalive_ms, deadline, since,
              kill_at_deadline](ChunkSink sink) -> asio::awaitable<std::optional<Response>> {
    // (Each message is made before its co_await: GCC mishandles braced temporaries in one.)
    std::string first = StartEvent(pid);
    if (!co_await sink(first)) co_return std::nullopt;
    uint64_t next = since;
    auto quiet_since = std::chrono::steady_clock::now();
    while (true) {
      auto rd = table->Read(id, pid, next, 256 * 1024);
      if (!rd.ok()) {
        std::string end = EndOfStream(rd.error());
        co_await sink(end);
        co_return std::nullopt;
      }
      std::string out;
      for (const auto& c : rd->chunks) {
        next = c.seq + 1;
        out += DataEvent(c.stream, rd->info.tty, c.data);
      }
      if (rd->chunks.empty() && !rd->info.running) {
        out += EndEvent(rd->info);
        out += EndOfStream(std::nullopt);
        co_await sink(out);
        co_return std::nullopt;
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        if (kill_at_deadline) (void)table->Signal(id, pid, SIGKILL);
        out += EndOfStream(MakeError(Code::kDeadlineExceeded, kill_at_deadline
                                                                  ? "the command's timeout passed; it was killed"
                                                                  : "the connection's timeout passed"));
        co_await sink(out);
        co_return std::nullopt;
      }
      if (!out.empty()) {
        if (!co_await sink(out)) co_return std::nullopt;  // the client went: the command runs on
        quiet_since = now;
        continue;
      }
      if (now - quiet_since >= std::chrono::milliseconds(keepalive_ms)) {
        std::string ka = KeepaliveEvent();
        if (!co_await sink(ka)) co_return std::nullopt;
        quiet_since = now;
      }
      auto wait = std::chrono::milliseconds(keepalive_ms) -
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - quiet_since);
      if (deadline != std::chrono::steady_clock::time_point::max())
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      co_await table->WaitOutput(id, pid, next, std::max(wait, std::chrono::milliseconds(1)));
    }
  };
  return r;
}

}  // namespace

bool IsEnvdRoute(const RouteInfo& r) { return r.access == Access::kE2bSandbox; }

// 204 while the sandbox runs; a paused or stopped one answers 502 as E2B's does (its
// envd is not there), so that isRunning() is false.
asio::awaitable<Response> Api::EnvdHealth(Request& req) {
  const std::string& id = req.params["id"];
  auto v = manager_->Get(id);
  if (!v.ok() || v->rec.state != "running")
    co_return Json(502, {{"code", 502}, {"message", "sandbox " + id + " is not running"}, {"sandboxId", id}});
  Response r;
  r.status = 204;
  co_return r;
}

// process.Process/Start: the command as a background process of the sandbox; the stream
// is its start (pid), its output (base64) and its end, with keep-alives while quiet. A
// Connect-Timeout-Ms that passes kills the command, as E2B's timeoutMs does.
asio::awaitable<Response> Api::EnvdStart(Request& req) {
  const std::string id = req.params["id"];
  if (Response bad; !SpeaksConnectJson(req, &bad)) co_return bad;
  auto msg = ReadEnvelope(req.body);
  if (!msg.ok()) co_return StreamError(msg.error());
  const json& m = *msg;
  if (!m.contains("process") || !m["process"].is_object())
    co_return StreamError(MakeError(Code::kInvalidArgument, "process is required"));
  const json& p = m["process"];
  core::ExecRequest e;
  if (!p.contains("cmd") || !p["cmd"].is_string() || p["cmd"].get<std::string>().empty())
    co_return StreamError(MakeError(Code::kInvalidArgument, "process.cmd is required"));
  e.argv.push_back(p["cmd"].get<std::string>());
  if (p.contains("args")) {
    if (!p["args"].is_array()) co_return StreamError(MakeError(Code::kInvalidArgument, "process.args must be an array"));
    for (const auto& a : p["args"]) {
      if (!a.is_string()) co_return StreamError(MakeError(Code::kInvalidArgument, "process.args must be strings"));
      e.argv.push_back(a.get<std::string>());
    }
  }
  if (p.contains("envs")) {
    if (!p["envs"].is_object()) co_return StreamError(MakeError(Code::kInvalidArgument, "process.envs must be an object"));
    for (const auto& [k, v] : p["envs"].items()) {
      if (!v.is_string()) co_return StreamError(MakeError(Code::kInvalidArgument, "process.envs values must be strings"));
      e.env[k] = v.get<std::string>();
    }
  }
  if (p.contains("cwd") && p["cwd"].is_string()) e.cwd = p["cwd"].get<std::string>();
  // A terminal (`sandbox.pty.create`): its size, and its input stays open.
  if (m.contains("pty") && !m["pty"].is_null()) {
    auto size = PtySize(m["pty"]);
    if (!size.ok()) co_return StreamError(size.error());
    e.tty = true;
    e.cols = size->first;
    e.rows = size->second;
  }
  bool keep_stdin = e.tty || (m.contains("stdin") && m["stdin"].is_boolean() && m["stdin"].get<bool>());
  auto user = BasicUser(req.Header("authorization"));
  if (!user.ok()) co_return StreamError(user.error());
  e.user = *user;
  auto timeout = TimeoutMs(req);
  if (!timeout.ok()) co_return StreamError(timeout.error());
  const int64_t deadline_ms = *timeout;
  auto ex = co_await asio::this_coro::executor;
  auto started = co_await processes_->Start(ex, id, std::move(e));
  if (!started.ok()) co_return StreamError(started.error());
  const int64_t pid = started->pid;
  if (!keep_stdin) (void)processes_->Stdin(id, pid, "", true);
  co_return CommandStream(processes_.get(), id, pid, manager_->keepalive_ms(), deadline_ms, 0, true);
}

// process.Process/SendSignal (unary, JSON): SIGKILL or SIGTERM to a command by its pid
// (`handle.kill()`, `commands.kill(pid)`); an unknown pid is not_found.
asio::awaitable<Response> Api::EnvdSignal(Request& req) {
  const std::string id = req.params["id"];
  auto body = UnaryBody(req);
  if (!body.ok()) co_return ConnectError(body.error());
  const json& j = *body;
  auto pid = PidOf(j);
  if (!pid.ok()) co_return ConnectError(pid.error());
  const int64_t n = *pid;
  int sig = 0;
  const json s = j.value("signal", json());
  if (s == "SIGNAL_SIGKILL" || s == 9) sig = SIGKILL;
  else if (s == "SIGNAL_SIGTERM" || s == 15) sig = SIGTERM;
  else co_return ConnectError(MakeError(Code::kInvalidArgument, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM"));
  if (Status st = RequireRunning(processes_.get(), id, n); !st.ok()) co_return ConnectError(st.error());
  if (auto st = processes_->Signal(id, n, sig); !st.ok()) co_return ConnectError(st.error());
  co_return Json(200, json::object());
}

// process.Process/List (unary): the sandbox's running commands, as envd lists them
// (`commands.list()`): the command, its arguments and working folder.
asio::awaitable<Response> Api::EnvdList(Request& req) {
  const std::string id = req.params["id"];
  auto all = processes_->List(id);
  if (!all.ok()) co_return ConnectError(all.error());
  json out = json::array();
  for (const auto& p : *all) {
    if (!p.running || p.cmd.empty()) continue;
    json args = json::array();
    for (size_t i = 1; i < p.cmd.size(); ++i) args.push_back(p.cmd[i]);
    json config = {{"cmd", p.cmd[0]}, {"args", args}, {"envs", json::object()}};
    if (!p.cwd.empty()) config["cwd"] = p.cwd;
    out.push_back({{"config", config}, {"pid", p.pid}});
  }
  co_return Json(200, {{"processes", out}});
}

// process.Process/Connect (server stream): a running command's output from now on, and
// its end (`commands.connect(pid)`); the command's own timeout is not changed by it.
asio::awaitable<Response> Api::EnvdConnect(Request& req) {
  const std::string id = req.params["id"];
  if (Response bad; !SpeaksConnectJson(req, &bad)) co_return bad;
  auto msg = ReadEnvelope(req.body);
  if (!msg.ok()) co_return StreamError(msg.error());
  auto pid = PidOf(*msg);
  if (!pid.ok()) co_return StreamError(pid.error());
  auto timeout = TimeoutMs(req);
  if (!timeout.ok()) co_return StreamError(timeout.error());
  auto info = processes_->Get(id, *pid);
  if (!info.ok()) co_return StreamError(MakeError(Code::kNotFound, "no process " + std::to_string(*pid)));
  co_return CommandStream(processes_.get(), id, *pid, manager_->keepalive_ms(), *timeout, info->next_seq, false);
}

// process.Process/SendInput and CloseStdin (unary): bytes to a command's stdin (base64
// in `input.stdin`), or its end (`commands.sendStdin`, `closeStdin`).
asio::awaitable<Response> Api::EnvdInput(Request& req) {
  const std::string id = req.params["id"];
  const bool close = req.pattern == "/process.Process/CloseStdin";
  auto body = UnaryBody(req);
  if (!body.ok()) co_return ConnectError(body.error());
  const json& j = *body;
  auto pid = PidOf(j);
  if (!pid.ok()) co_return ConnectError(pid.error());
  std::string data;
  if (!close) {
    const json in = j.value("input", json::object());
    // A terminal's input (`pty`) goes to it as a command's stdin does.
    const char* key = in.contains("pty") ? "pty" : "stdin";
    if (!in.contains(key) || !in[key].is_string())
      co_return ConnectError(MakeError(Code::kInvalidArgument, "input.stdin or input.pty (base64) is required"));
    auto bytes = Base64Decode(in[key].get<std::string>());
    if (!bytes.ok()) co_return ConnectError(MakeError(Code::kInvalidArgument, std::string("input.") + key + " is not base64"));
    data = std::move(*bytes);
  }
  if (Status st = RequireRunning(processes_.get(), id, *pid); !st.ok()) co_return ConnectError(st.error());
  if (auto st = processes_->Stdin(id, *pid, data, close); !st.ok()) co_return ConnectError(st.error());
  co_return Json(200, json::object());
}

// process.Process/Update (unary): a terminal's new size (`pty.resize`).
asio::awaitable<Response> Api::EnvdUpdate(Request& req) {
  const std::string id = req.params["id"];
  auto body = UnaryBody(req);
  if (!body.ok()) co_return ConnectError(body.error());
  const json& j = *body;
  auto pid = PidOf(j);
  if (!pid.ok()) co_return ConnectError(pid.error());
  if (!j.contains("pty") || j["pty"].is_null()) co_return Json(200, json::object());  // nothing to change
  auto size = PtySize(j["pty"]);
  if (!size.ok()) co_return ConnectError(size.error());
  if (Status st = RequireRunning(processes_.get(), id, *pid); !st.ok()) co_return ConnectError(st.error());
  if (auto st = processes_->Resize(id, *pid, size->first, size->second); !st.ok()) co_return ConnectError(st.error());
  co_return Json(200, json::object());
}

}  // namespace sbx::api
