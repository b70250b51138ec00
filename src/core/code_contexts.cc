#include "core/code_contexts.h"

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <tuple>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <utility>

#include "base/ids.h"
#include "base/scope_exit.h"

namespace sbx::core {

// The interpreter's source (core/code_interpreter.py), built in by CMake.
extern const char* const kCodeInterpreter;

namespace {

namespace asio = boost::asio;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What the interpreter's argv starts with; its program comes in this variable (which it
// takes out of its environment before any cell runs).
const char* const kBoot = "import os;exec(os.environ.pop('SBX_CODE_INTERPRETER'))";
const char* const kTag = "sbx-code";
constexpr int64_t kStartTimeoutMs = 30000;
constexpr int64_t kInterruptGraceMs = 3000;
constexpr size_t kMaxMessage = size_t{16} << 20;  // one line of the interpreter (a large figure)

bool ValidLanguage(const std::string& l) { return l == "python" || l == "bash"; }

bool ValidContextId(const std::string& id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

// The context a process runs, if it is an interpreter of ours.
std::optional<CodeContext> ContextOf(const ProcessInfo& p) {
  const auto& c = p.cmd;
  if (!p.running || c.size() != 7 || c[0] != "python3" || c[3] != kBoot || c[4] != kTag) return std::nullopt;
  return CodeContext{c[5], c[6], p.cwd, p.user.empty() ? "root" : p.user, p.pid, p.started_ms};
}

asio::awaitable<void> Sleep(asio::any_io_executor ex, int64_t ms) {
  asio::steady_timer t(ex, std::chrono::milliseconds(ms));
  boost::system::error_code ignored;
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
}

// The JSON below is built outside the coroutines: g++ 12 mishandles initializer lists in
// coroutine bodies (a bad_array_new_length at run time).
ExecRequest InterpreterRequest(const std::string& id, const std::string& language, const std::string& cwd,
                               const std::string& user) {
  ExecRequest e;
  e.argv = {"python3", "-u", "-c", kBoot, kTag, id, language};
  e.cwd = cwd;
  e.user = user;
  e.env["SBX_CODE_INTERPRETER"] = kCodeInterpreter;
  return e;
}

std::string CellLine(int64_t n, const CodeCell& cell) {
  json j = {{"cell", n}, {"code", cell.code}, {"env", cell.env}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

json Message(const std::string& type, const std::string& name, const std::string& value) {
  if (type == "stderr") return {{"type", type}, {"text", value}};
  return {{"type", type}, {"name", name}, {"value", value}, {"traceback", ""}};
}

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

}  // namespace

CodeContexts::CodeContexts(SandboxManager* manager, ProcessTable* processes)
    : manager_(manager), processes_(processes), next_cell_(NowUnixMs() * 1000) {}

Status CodeContexts::Kill(const std::string& sandbox, const CodeContext& c) {
  // Marked first, so that no one finds it between the signal and its end.
  {
    std::lock_guard<std::mutex> lock(mu_);
    killed_.insert({sandbox, c.pid, c.started_ms});
  }
  Status st = processes_->Signal(sandbox, c.pid, SIGKILL);
  if (!st.ok() && st.error().code != Code::kFailedPrecondition) {
    std::lock_guard<std::mutex> lock(mu_);
    killed_.erase({sandbox, c.pid, c.started_ms});  // still there (its sandbox hibernated, say)
    return st;
  }
  return OkStatus();  // killed, or ended already
}

std::map<std::string, CodeContext> CodeContexts::Live(const std::string& sandbox,
                                                      const std::vector<ProcessInfo>& procs) {
  std::map<std::string, CodeContext> out;
  std::lock_guard<std::mutex> lock(mu_);
  // Marks of interpreters that have ended (or are no longer listed) go.
  std::set<std::tuple<std::string, int64_t, int64_t>> running;
  for (const auto& p : procs)
    if (p.running) running.insert({sandbox, p.pid, p.started_ms});
  for (auto it = killed_.lower_bound({sandbox, INT64_MIN, INT64_MIN});
       it != killed_.end() && std::get<0>(*it) == sandbox;)
    it = running.count(*it) ? std::next(it) : killed_.erase(it);
  for (const auto& p : procs) {
    auto c = ContextOf(p);
    if (!c || killed_.count({sandbox, p.pid, p.started_ms})) continue;
    auto it = out.find(c->id);
    if (it == out.end() || c->started_ms >= it->second.started_ms) out[c->id] = *c;  // the newest of an id
  }
  return out;
}

Result<CodeContext> CodeContexts::Find(const std::string& sandbox, const std::string& id) {
  SBX_ASSIGN_OR_RETURN(auto procs, processes_->List(sandbox));
  auto live = Live(sandbox, procs);
  auto it = live.find(id);
  if (it == live.end()) return MakeError(Code::kNotFound, "no code context \"" + id + "\" in sandbox " + sandbox);
  return it->second;
}

Result<std::vector<CodeContext>> CodeContexts::List(const std::string& sandbox) {
  if (auto v = manager_->Get(sandbox); !v.ok()) return v.error();
  SBX_ASSIGN_OR_RETURN(auto procs, processes_->List(sandbox));
  std::vector<CodeContext> out;
  for (auto& [id, c] : Live(sandbox, procs)) out.push_back(std::move(c));
  return out;
}

bool CodeContexts::TryHold(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& h = held_[key];
  if (h.busy || !h.waiting.empty()) return false;
  h.busy = true;
  return true;
}

asio::awaitable<bool> CodeContexts::Hold(asio::any_io_executor ex, const std::string& key, int64_t max_ms) {
  auto t0 = Clock::now();
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    held_[key].waiting.insert(ticket);
  }
  while (true) {
    {
      // In the order they came: the oldest waiter takes it when it is free.
      std::lock_guard<std::mutex> lock(mu_);
      auto& h = held_[key];
      if (!h.busy && *h.waiting.begin() == ticket) {
        h.waiting.erase(ticket);
        h.busy = true;
        co_return true;
      }
      if (MsSince(t0) > max_ms) {
        h.waiting.erase(ticket);
        if (!h.busy && h.waiting.empty()) held_.erase(key);
        co_return false;
      }
    }
    co_await Sleep(ex, 5);
  }
}

void CodeContexts::Release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return;
  it->second.busy = false;
  if (it->second.waiting.empty()) held_.erase(it);
}

asio::awaitable<Result<CodeContext>> CodeContexts::Start(asio::any_io_executor ex, const std::string& sandbox,
                                                         const std::string& id, const std::string& language,
                                                         const std::string& cwd, const std::string& user) {
  // Arguments of a co_await are named: g++ 12 destroys a temporary there twice.
  ExecRequest request = InterpreterRequest(id, language, cwd, user);
  auto started = co_await processes_->Start(ex, sandbox, std::move(request));
  if (!started.ok()) {
    const Error& err = started.error();
    if (err.message.find("exec python3") != std::string::npos)
      co_return MakeError(Code::kFailedPrecondition, "the code interpreter needs python3, which sandbox " + sandbox +
                                                         "'s image does not have (" + err.message + ")");
    co_return err;
  }
  const int64_t pid = started->pid;
  const CodeContext made{id, language, started->cwd, started->user.empty() ? "root" : started->user, pid,
                         started->started_ms};
  // Its first line says it is ready (or, if it ends first, its stderr says why not).
  auto t0 = Clock::now();
  uint64_t since = 0;
  std::string out, err;
  while (true) {
    auto r = processes_->Read(sandbox, pid, since, 1 << 20);
    if (!r.ok()) co_return r.error();
    for (const auto& c : r->chunks) {
      (c.stream == 1 ? out : err) += c.data;
      since = c.seq + 1;
    }
    for (size_t nl; (nl = out.find('\n')) != std::string::npos; out.erase(0, nl + 1)) {
      if (nl == 0) continue;  // messages come on lines of their own
      auto j = json::parse(out.substr(0, nl), nullptr, false);
      if (j.is_object() && j.value("type", "") == "ready") co_return made;
      (void)Kill(sandbox, made);
      co_return MakeError(Code::kInternal, "the code interpreter said " + out.substr(0, std::min<size_t>(nl, 200)));
    }
    if (!r->info.running && r->chunks.empty())
      co_return MakeError(Code::kFailedPrecondition,
                          "the code interpreter did not start: " + (err.empty() ? std::string("it exited") : err.substr(0, 2000)));
    if (MsSince(t0) > kStartTimeoutMs) {
      (void)Kill(sandbox, made);
      co_return MakeError(Code::kUnavailable, "the code interpreter did not start within 30 s");
    }
    co_await processes_->WaitOutput(sandbox, pid, since, std::chrono::milliseconds(500));
  }
}

asio::awaitable<Result<CodeContext>> CodeContexts::Create(asio::any_io_executor ex, std::string sandbox,
                                                          std::string language, std::string cwd, std::string user) {
  if (language.empty()) language = "python";
  if (!ValidLanguage(language)) co_return MakeError(Code::kInvalidArgument, "language must be python or bash");
  std::string id = "ctx-" + RandomHex(8);
  const std::string key = sandbox + "/" + id;
  TryHold(key);  // a new id: no one else has it
  ScopeExit release([&] { Release(key); });
  co_return co_await Start(ex, sandbox, id, language, cwd, user);
}

asio::awaitable<Result<CodeContext>> CodeContexts::Restart(asio::any_io_executor ex, std::string sandbox,
                                                           std::string id) {
  const std::string key = sandbox + "/" + id;
  if (!TryHold(key))
    co_return MakeError(Code::kFailedPrecondition, "code context \"" + id + "\" is running a cell; try again");
  ScopeExit release([&] { Release(key); });
  if (auto v = manager_->Get(sandbox); !v.ok()) co_return v.error();
  auto c = Find(sandbox, id);
  if (!c.ok()) co_return c.error();
  if (Status st = Kill(sandbox, *c); !st.ok()) co_return st.error();
  co_return co_await Start(ex, sandbox, id, c->language, c->cwd, c->user);
}

Status CodeContexts::Delete(const std::string& sandbox, const std::string& id) {
  if (auto v = manager_->Get(sandbox); !v.ok()) return v.error();
  const std::string key = sandbox + "/" + id;
  if (!TryHold(key)) return MakeError(Code::kFailedPrecondition, "code context \"" + id + "\" is running a cell; try again");
  ScopeExit release([&] { Release(key); });
  SBX_ASSIGN_OR_RETURN(auto c, Find(sandbox, id));
  // The interpreter goes; until it has, it is neither listed nor found.
  return Kill(sandbox, c);
}

asio::awaitable<Result<CellEnd>> CodeContexts::Replace(asio::any_io_executor ex, const std::string& sandbox,
                                                       const CodeContext& ctx, CellEnd& end, CellEventFn& on_event,
                                                       const std::string& why) {
  (void)Kill(sandbox, ctx);
  auto fresh = co_await Start(ex, sandbox, ctx.id, ctx.language, ctx.cwd, ctx.user);
  end.restarted = fresh.ok();
  std::string value = why + (fresh.ok() ? std::string("; a new interpreter took its place (the context's state is gone)")
                                        : "; no new one could start: " + fresh.error().message);
  json msg = Message("error", end.timed_out ? "TimeoutError" : "ContextDied", value);
  co_await on_event(msg);
  co_return end;
}

asio::awaitable<Result<CellEnd>> CodeContexts::Run(asio::any_io_executor ex, std::string sandbox, CodeCell cell,
                                                   CellEventFn on_event) {
  if (!cell.language.empty() && !ValidLanguage(cell.language))
    co_return MakeError(Code::kInvalidArgument, "language must be python or bash");
  if (!cell.context.empty() && !ValidContextId(cell.context))
    co_return MakeError(Code::kInvalidArgument, "context must be a context id (from POST .../code/contexts)");
  if (cell.timeout_seconds < 1 || cell.timeout_seconds > 86400)
    co_return MakeError(Code::kInvalidArgument, "timeout_seconds must be between 1 and 86400");
  if (Status st = ValidateEnv(cell.env, "env"); !st.ok()) co_return st.error();
  // The sandbox's agent for the cell: a paused sandbox with auto_resume is resumed, one
  // that does not run answers 409, and the cell counts as the sandbox's activity.
  auto lease = co_await manager_->AcquireAgent(sandbox);
  if (!lease.ok()) co_return lease.error();
  const bool by_default = cell.context.empty();
  const std::string id = by_default ? (cell.language.empty() ? "python" : cell.language) : cell.context;
  const std::string key = sandbox + "/" + id;
  const int64_t timeout_ms = cell.timeout_seconds * 1000;
  if (!co_await Hold(ex, key, timeout_ms))
    co_return MakeError(Code::kUnavailable, "code context \"" + id + "\" stayed busy with earlier cells for " +
                                                std::to_string(cell.timeout_seconds) + " s");
  ScopeExit release([&] { Release(key); });

  CellEnd end;
  end.context = id;
  auto ctx = Find(sandbox, id);
  if (!ctx.ok() && ctx.error().code == Code::kNotFound && by_default) {
    const std::string none;  // cwd and user: the sandbox's defaults
    ctx = co_await Start(ex, sandbox, id, id, none, none);
  }
  if (!ctx.ok()) co_return ctx.error();
  if (!cell.language.empty() && cell.language != ctx->language)
    co_return MakeError(Code::kInvalidArgument, "code context \"" + id + "\" runs " + ctx->language + ", not " + cell.language);

  const int64_t n = next_cell_++;
  auto info = processes_->Get(sandbox, ctx->pid);
  if (!info.ok()) co_return info.error();
  uint64_t since = info->next_seq;
  std::string line = CellLine(n, cell);
  if (Status st = processes_->Stdin(sandbox, ctx->pid, line, false); !st.ok()) co_return st.error();

  auto t0 = Clock::now();
  bool interrupted = false;
  int64_t interrupted_at = 0;
  std::string buf;
  bool resync = false;  // output was lost: what precedes the next newline is a cut line
  while (true) {
    auto r = processes_->Read(sandbox, ctx->pid, since, 1 << 20);
    if (!r.ok()) co_return r.error();
    if (r->missed_to > r->missed_from && r->missed_to > since) {
      // The ring dropped output before sbxd read it (sbxd fell behind a flood).
      since = r->missed_to;
      buf.clear();
      resync = true;
      json lost = Message("stderr", "", "[sbx: output was lost: the cell wrote faster than it could be followed]\n");
      co_await on_event(lost);
    }
    for (const auto& c : r->chunks) {
      since = c.seq + 1;
      if (c.stream == 1) buf += c.data;
    }
    if (buf.size() > kMaxMessage && buf.find('\n') == std::string::npos) {
      // No message is this large (the cell wrote to the interpreter's own channel): dropped.
      buf.clear();
      resync = true;
      json dropped = Message("stderr", "", "[sbx: the interpreter sent a line over 16 MiB; dropped]\n");
      co_await on_event(dropped);
    }
    size_t at = 0, nl;
    while ((nl = buf.find('\n', at)) != std::string::npos) {
      std::string_view text = std::string_view(buf).substr(at, nl - at);
      at = nl + 1;
      if (resync) {
        resync = false;
        continue;
      }
      if (text.empty() || text.front() != '{') continue;
      auto m = json::parse(text, nullptr, false);
      // Another cell's, a forged or a cut line: not a message of this cell.
      if (!m.is_object() || !m.contains("cell") || m["cell"] != n || !m.contains("type") || !m["type"].is_string())
        continue;
      m.erase("cell");
      if (m["type"] == "end") {
        end.execution_count = m.contains("execution_count") && m["execution_count"].is_number_integer()
                                  ? m["execution_count"].get<int64_t>()
                                  : 0;
        co_return end;
      }
      co_await on_event(m);
    }
    buf.erase(0, at);
    if (!r->info.running && r->chunks.empty()) {
      std::string how = r->info.signal ? "was killed by signal " + std::to_string(r->info.signal)
                        : r->info.exit_code ? "exited with status " + std::to_string(*r->info.exit_code)
                                            : "ended (" + r->info.error + ")";
      std::string why = "the interpreter " + how + " during the cell";
      co_return co_await Replace(ex, sandbox, *ctx, end, on_event, why);
    }
    const int64_t ran = MsSince(t0);
    if (!interrupted && ran >= timeout_ms) {
      interrupted = true;
      interrupted_at = ran;
      end.timed_out = true;
      (void)processes_->Signal(sandbox, ctx->pid, SIGINT);
    } else if (interrupted && ran - interrupted_at >= kInterruptGraceMs) {
      std::string why = "the cell ran past " + std::to_string(cell.timeout_seconds) + " s and did not stop when interrupted";
      co_return co_await Replace(ex, sandbox, *ctx, end, on_event, why);
    }
    int64_t wait = interrupted ? kInterruptGraceMs - (ran - interrupted_at) : timeout_ms - ran;
    co_await processes_->WaitOutput(sandbox, ctx->pid, since, std::chrono::milliseconds(std::clamp<int64_t>(wait, 1, 1000)));
  }
}

}  // namespace sbx::core
