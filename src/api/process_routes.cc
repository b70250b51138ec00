// The background-process routes: start, list, show, signal, stdin, and the output ring
// (replayed and followed as NDJSON).
#include <signal.h>

#include <algorithm>
#include <utility>

#include <boost/asio/this_coro.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "api/decode.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "base/base64.h"
#include "base/ids.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

json ProcessJson(const core::ProcessInfo& p) {
  return {{"pid", p.pid},
          {"cmd", p.cmd},
          {"cwd", p.cwd},
          {"user", p.user.empty() ? "root" : p.user},
          {"state", p.running ? "running" : "exited"},
          {"exit_code", p.exit_code ? json(*p.exit_code) : json(nullptr)},
          {"signal", p.signal ? json(p.signal) : json(nullptr)},
          {"error", p.error.empty() ? json(nullptr) : json(p.error)},
          {"started_at", FormatRfc3339(p.started_ms)},
          {"ended_at", p.ended_ms ? json(FormatRfc3339(p.ended_ms)) : json(nullptr)},
          {"stdin_open", p.stdin_open},
          {"tty", p.tty},
          {"next_seq", p.next_seq}};
}

Result<int64_t> PidParam(const Request& req) {
  const std::string& s = req.params.at("pid");
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    return MakeError(Code::kInvalidArgument, "pid must be a process id (a positive number)");
  return std::stoll(s);
}

Result<int> SignalOf(const json& v) {
  static const std::pair<const char*, int> kNames[] = {
      {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"WINCH", SIGWINCH}};
  if (v.is_number_integer()) {
    int64_t n = v.get<int64_t>();
    if (n >= 1 && n <= 64) return static_cast<int>(n);
  } else if (v.is_string()) {
    std::string n = v.get<std::string>();
    if (n.rfind("SIG", 0) == 0) n = n.substr(3);
    for (const auto& [name, num] : kNames)
      if (n == name) return num;
  }
  return MakeError(Code::kInvalidArgument, "signal must be 1-64 or a name such as TERM, KILL, INT, HUP");
}

std::string Line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

}  // namespace

asio::awaitable<Response> Api::Processes(Request& req) {
  const std::string& pat = req.pattern;
  const std::string id = req.params["id"];
  if (pat == "/v1/sandboxes/{id}/processes" && req.method == "POST") {
    auto j = ParseObject(req.body, {"cmd", "cwd", "env", "tty", "cols", "rows", "user"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    core::ExecRequest e;
    auto tty = GetBool(*j, "tty", false);
    auto cols = GetInt(*j, "cols");
    auto rows = GetInt(*j, "rows");
    if (!tty.ok()) co_return ErrorResponse(tty.error());
    if (!cols.ok()) co_return ErrorResponse(cols.error());
    if (!rows.ok()) co_return ErrorResponse(rows.error());
    e.tty = *tty;
    if (*cols) e.cols = static_cast<int>(std::clamp<int64_t>(**cols, 0, 100000));
    if (*rows) e.rows = static_cast<int>(std::clamp<int64_t>(**rows, 0, 100000));
    if (e.cols < 1 || e.cols > 10000 || e.rows < 1 || e.rows > 10000)
      co_return Bad("cols and rows must be between 1 and 10000");
    if (auto st = DecodeCommand(*j, &e); !st.ok()) co_return ErrorResponse(st.error());
    auto ex = co_await asio::this_coro::executor;
    auto started = co_await processes_->Start(ex, id, std::move(e));
    if (!started.ok()) co_return ErrorResponse(started.error());
    json out = ProcessJson(*started);
    out["type"] = "process.started";
    co_return Json(201, out);
  }
  if (auto v = manager_->Get(id); !v.ok()) co_return ErrorResponse(v.error());  // 404 for no sandbox
  if (pat == "/v1/sandboxes/{id}/processes") {
    auto list = processes_->List(id);
    if (!list.ok()) co_return ErrorResponse(list.error());
    json arr = json::array();
    for (const auto& p : *list) arr.push_back(ProcessJson(p));
    co_return Json(200, {{"processes", arr}});
  }
  auto pid = PidParam(req);
  if (!pid.ok()) co_return ErrorResponse(pid.error());
  if (pat == "/v1/sandboxes/{id}/processes/{pid}") {
    auto p = processes_->Get(id, *pid);
    if (!p.ok()) co_return ErrorResponse(p.error());
    co_return Json(200, ProcessJson(*p));
  }
  if (pat == "/v1/sandboxes/{id}/processes/{pid}/signal") {
    auto j = ParseObject(req.body, {"signal"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto sig = SignalOf(j->contains("signal") ? (*j)["signal"] : json("TERM"));
    if (!sig.ok()) co_return ErrorResponse(sig.error());
    auto st = processes_->Signal(id, *pid, *sig);
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "process.signalled"}, {"pid", *pid}, {"signal", *sig}});
  }
  if (pat == "/v1/sandboxes/{id}/processes/{pid}/stdin") {
    auto j = ParseObject(req.body, {"data", "eof", "encoding"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto data = GetString(*j, "data");
    auto eof = GetBool(*j, "eof", false);
    auto encoding = GetString(*j, "encoding", "text");
    if (!data.ok()) co_return ErrorResponse(data.error());
    if (!eof.ok()) co_return ErrorResponse(eof.error());
    if (!encoding.ok()) co_return ErrorResponse(encoding.error());
    if (*encoding != "text" && *encoding != "base64") co_return Bad("encoding must be \"text\" or \"base64\"");
    if (*encoding == "base64") {
      auto raw = Base64Decode(*data);
      if (!raw.ok()) co_return Bad("data (encoding base64) is not base64: " + raw.error().message);
      *data = std::move(*raw);
    }
    auto st = processes_->Stdin(id, *pid, *data, *eof);
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "process.stdin"}, {"pid", *pid}, {"bytes", data->size()}, {"eof", *eof}});
  }
  if (pat == "/v1/sandboxes/{id}/processes/{pid}/resize") {
    auto j = ParseObject(req.body, {"cols", "rows"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto cols = GetInt(*j, "cols");
    auto rows = GetInt(*j, "rows");
    if (!cols.ok()) co_return ErrorResponse(cols.error());
    if (!rows.ok()) co_return ErrorResponse(rows.error());
    if (!*cols || !*rows) co_return Bad("cols and rows are required");
    auto st = processes_->Resize(id, *pid, static_cast<int>(std::clamp<int64_t>(**cols, 0, 100000)),
                                 static_cast<int>(std::clamp<int64_t>(**rows, 0, 100000)));
    if (!st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "process.resized"}, {"pid", *pid}, {"cols", **cols}, {"rows", **rows}});
  }
  if (pat == "/v1/sandboxes/{id}/processes/{pid}/tty")
    co_return Bad("the terminal is a WebSocket: send Upgrade: websocket");
  // Output: NDJSON lines {"type":"stdout"|"stderr","seq","data"}, "gap" when part of
  // what was asked for already left the ring, "keepalive" while quiet, "exit" at the end.
  uint64_t since = 0;
  if (req.query.count("since")) {
    const std::string& s = req.query.at("since");
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
      co_return Bad("since must be a sequence number");
    since = std::stoull(s);
  }
  bool follow = false;
  if (req.query.count("follow")) {
    const std::string& f = req.query.at("follow");
    if (f != "true" && f != "false" && f != "1" && f != "0") co_return Bad("follow must be true or false");
    follow = f == "true" || f == "1";
  }
  bool base64 = false;
  if (req.query.count("encoding")) {
    const std::string& e = req.query.at("encoding");
    if (e != "text" && e != "base64") co_return Bad("encoding must be text or base64");
    base64 = e == "base64";
  }
  if (auto first = processes_->Get(id, *pid); !first.ok()) co_return ErrorResponse(first.error());
  Response r;
  r.content_type = "application/x-ndjson";
  core::ProcessTable* table = processes_.get();
  int64_t keepalive_ms = manager_->keepalive_ms();
  int64_t p = *pid;
  r.stream = [table, id, p, since, follow, keepalive_ms, base64](ChunkSink sink) -> asio::awaitable<std::optional<Response>> {
    std::string carry[3];
    uint64_t next = since;
    auto quiet_since = std::chrono::steady_clock::now();
    while (true) {
      auto rd = table->Read(id, p, next, 256 * 1024);
      if (!rd.ok()) co_return std::nullopt;  // forgotten (the sandbox was deleted)
      std::string out;
      if (rd->missed_to > rd->missed_from)
        out += Line({{"type", "gap"}, {"from", rd->missed_from}, {"to", rd->missed_to}});
      for (const auto& c : rd->chunks) {
        // base64: each chunk's exact bytes; text: whole UTF-8 characters, a character cut
        // between chunks carried to the next one.
        std::string text = base64 ? Base64Encode(c.data) : TakeUtf8(carry[c.stream], c.data);
        next = c.seq + 1;
        if (text.empty()) continue;
        out += Line({{"type", c.stream == 1 ? "stdout" : "stderr"}, {"seq", c.seq}, {"data", text}});
      }
      bool more = !rd->chunks.empty();
      if (!more && !rd->info.running) {
        for (int k = 1; k <= 2; ++k)
          if (!carry[k].empty()) out += Line({{"type", k == 1 ? "stdout" : "stderr"}, {"seq", next - 1}, {"data", carry[k]}});
        json exit = {{"type", "exit"}, {"pid", p},
                     {"exit_code", rd->info.exit_code ? json(*rd->info.exit_code) : json(nullptr)},
                     {"signal", rd->info.signal ? json(rd->info.signal) : json(nullptr)},
                     {"error", rd->info.error.empty() ? json(nullptr) : json(rd->info.error)},
                     {"next_seq", rd->info.next_seq}};
        out += Line(exit);
        co_await sink(out);
        co_return std::nullopt;
      }
      auto now = std::chrono::steady_clock::now();
      if (!out.empty()) {
        if (!co_await sink(out)) co_return std::nullopt;
        quiet_since = now;
      }
      if (more) continue;
      if (!follow) co_return std::nullopt;
      if (now - quiet_since >= std::chrono::milliseconds(keepalive_ms)) {
        std::string ka = Line({{"type", "keepalive"}});
        if (!co_await sink(ka)) co_return std::nullopt;
        quiet_since = now;
      }
      // Woken by new output or the end; at the latest when a keep-alive is due.
      auto due = std::chrono::milliseconds(keepalive_ms) -
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - quiet_since);
      co_await table->WaitOutput(id, p, next, std::max(due, std::chrono::milliseconds(1)));    }
  };
  co_return r;
}

}  // namespace sbx::api
