// Exec: a command in a running sandbox through its agent, with the environment core
// composes (base, id and token, secrets, the sandbox's, the request's); the leases that
// file, port and process operations hold on an agent; and auto-resume, core's policy for
// a paused sandbox that a call reaches.
#include <chrono>

#include <nlohmann/json.hpp>

#include "agent/protocol.h"
#include "base/fault.h"
#include "base/run_blocking.h"
#include "base/ids.h"
#include "base/log.h"
#include "core/layer_files.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

namespace asio = boost::asio;
using nlohmann::json;

Status SandboxManager::RunnableLocked(const Entry& e) {
  const std::string& id = e.rec.id;
  if (e.is(State::kPaused) && !e.busy)
    return MakeError(Code::kFailedPrecondition,
                     "sandbox " + id + " is paused" +
                         (e.rec.auto_resume ? std::string("; try again") : std::string(" and its auto_resume is off; resume it first")));
  if (!e.is(State::kRunning) || e.busy)
    return MakeError(Code::kFailedPrecondition,
                     "sandbox " + id + " is " + (e.busy ? std::string("changing state") : e.rec.state) + ", not running");
  if (!runtimes_->Find(e.rec.isolation))
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is of isolation " + e.rec.isolation +
                                                    ", which this sbxd does not have (start sbxd with that wall)");
  if (!Rt(e.rec).Alive(e.inst))
    return MakeError(Code::kUnavailable,
                     "sandbox " + id + " has stopped unexpectedly (its init exited); it will be marked error");
  return OkStatus();
}

// The content of /run/sbx.env for sandbox `id` and its token ("" when tokens are off).
static std::string SelfEnvOf(const std::string& id, const std::string& token) {
  return "SBX_SANDBOX_ID=" + id + "\n" + (token.empty() ? "" : "SBX_TOKEN=" + token + "\n");
}

std::vector<std::string> SandboxManager::ExecEnv(const Entry& e, const std::map<std::string, std::string>& extra,
                                                 bool as_root, std::string* self_env) const {
  std::map<std::string, std::string> env = opts_.base_env;
  if (!as_root) env.erase("HOME");
  env["SBX_SANDBOX_ID"] = e.rec.id;
  const std::string token = secrets_.TokenFor(e.rec.id, e.rec.token_gen);
  if (!token.empty()) env["SBX_TOKEN"] = token;
  env["SBX_ENV_FILE"] = agent::kSelfEnvPath;
  if (self_env) *self_env = SelfEnvOf(e.rec.id, token);
  if (!e.rec.no_env) secrets_.AddTo(env);
  auto senv = json::parse(e.rec.env_json, nullptr, false);
  if (senv.is_object())
    for (auto& [k, v] : senv.items())
      if (v.is_string()) env[k] = v.get<std::string>();
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

// How long a renewal of /run/sbx.env may take (an agent round trip).
constexpr int kSelfEnvMs = 5000;

void SandboxManager::RenewSelfEnv(const std::string& id) {
  std::string content;
  agent::DialerPtr addr;
  {
    Lock lock(table_.mu);
    EntryPtr e = table_.Get(id);
    if (!e || !e->is(State::kRunning) || !e->inst.agent) return;  // its next command writes it
    content = SelfEnvOf(id, secrets_.TokenFor(id, e->rec.token_gen));
    addr = e->inst.agent;
  }
  if (Status st = agent::SelfEnvBlocking(*addr, kSelfEnvMs, content); !st.ok())
    SBX_LOG(kWarn) << "sandbox " << id << ": its " << agent::kSelfEnvPath
                   << " stays as it was until its next command: " << st.error().message;
}

Status SandboxManager::CheckExecRequest(const ExecRequest& req) const {
  if (req.argv.empty() || req.argv[0].empty()) return MakeError(Code::kInvalidArgument, "cmd is empty");
  SBX_RETURN_IF_ERROR(ValidateEnv(req.env, "exec env"));
  for (const auto& a : req.argv)
    if (a.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, "cmd holds a NUL byte");
  if (req.cwd.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, "cwd holds a NUL byte");
  if (!ValidUser(req.user))
    return MakeError(Code::kInvalidArgument, "invalid user \"" + req.user.substr(0, 64) +
                                                 "\": a user name ([a-z_][a-z0-9_.-]{0,31}, $ at the end allowed) or a uid");
  return OkStatus();
}

Result<EntryPtr> SandboxManager::CallableLocked(const std::string& id, bool may_wake, bool* wake) {
  SBX_ASSIGN_OR_RETURN(EntryPtr e, table_.Find(id));
  *wake = may_wake && e->is(State::kPaused) && e->rec.auto_resume;
  if (!*wake) SBX_RETURN_IF_ERROR(RunnableLocked(*e));
  return e;
}

asio::awaitable<Status> SandboxManager::Wake(const std::string& id) {
  // A resume that another call started first answers kFailedPrecondition; the call then
  // finds it running, or says why not.
  std::function<Result<SandboxView>()> fn = [this, &id] { return Resume(id); };
  auto v = co_await RunBlocking(&blocking_, &fn);
  if (!v.ok() && v.error().code != Code::kFailedPrecondition) co_return v.error();
  co_return OkStatus();
}

std::shared_ptr<AgentLease> SandboxManager::LeaseLocked(const EntryPtr& e) {
  ++e->active_execs;
  e->last_active_ms = Now();
  // Its end takes no lock: the counters are atomic.
  return std::make_shared<AgentLease>(e->inst.agent, static_cast<uint64_t>(e->rec.disk_mb) << 20, e->rec.user, [this, e] {
    --e->active_execs;
    e->last_active_ms = Now();
  });
}

Result<std::shared_ptr<AgentLease>> SandboxManager::LeaseAgent(const std::string& id) {
  Lock lock(table_.mu);
  bool wake;
  SBX_ASSIGN_OR_RETURN(EntryPtr e, CallableLocked(id, false, &wake));
  return LeaseLocked(e);
}

asio::awaitable<Result<std::shared_ptr<AgentLease>>> SandboxManager::AcquireAgent(const std::string& id) {
  for (bool may_wake = true;; may_wake = false) {
    {
      Lock lock(table_.mu);
      bool wake;
      auto e = CallableLocked(id, may_wake, &wake);
      if (!e.ok()) co_return e.error();
      if (!wake) co_return LeaseLocked(*e);
    }
    if (Status st = co_await Wake(id); !st.ok()) co_return st.error();
  }
}

asio::awaitable<Result<PreparedProcess>> SandboxManager::PrepareProcess(const std::string& id, ExecRequest req) {
  if (Status st = CheckExecRequest(req); !st.ok()) co_return st.error();
  PreparedProcess p;
  for (bool may_wake = true; !p.lease; may_wake = false) {
    {
      Lock lock(table_.mu);
      bool wake;
      auto e = CallableLocked(id, may_wake, &wake);
      if (!e.ok()) co_return e.error();
      if (!wake) {
        if (req.user.empty()) req.user = (*e)->rec.user;  // the sandbox's default
        p.req.env = ExecEnv(**e, req.env, req.as_root(), &p.req.self_env);
        p.lease = LeaseLocked(*e);
        ++execs_;
      }
    }
    if (!p.lease)
      if (Status st = co_await Wake(id); !st.ok()) co_return st.error();
  }
  p.req.argv = req.argv;
  p.req.cwd = !req.cwd.empty() ? req.cwd : req.as_root() ? opts_.default_cwd : "";
  if (!req.as_root()) p.req.user = req.user;
  p.req.timeout_ms = 0;                              // runs until it ends or is signalled
  p.req.stdout_cap = p.req.stderr_cap = UINT64_MAX;  // the daemon's ring keeps the latest
  p.req.stdin_open = true;
  p.req.report_pid = true;
  p.req.tty = req.tty;
  p.req.cols = req.cols;
  p.req.rows = req.rows;
  p.req.keepalive_ms = opts_.keepalive_ms;
  co_return p;
}

asio::awaitable<Result<ExecResult>> SandboxManager::Exec(asio::any_io_executor ex, const std::string& id,
                                                         ExecRequest req, agent::OutputFn on_output) {
  if (auto st = CheckExecRequest(req); !st.ok()) co_return st.error();
  if (req.timeout_seconds < 1 || req.timeout_seconds > opts_.max_exec_timeout_seconds)
    co_return MakeError(Code::kInvalidArgument,
                        "timeout_seconds must be between 1 and " + std::to_string(opts_.max_exec_timeout_seconds));
  agent::ExecRequest areq;
  std::shared_ptr<AgentLease> lease;  // held until the answer
  double usd_per_hour = 0;
  // One look at the table (two for a paused sandbox that wakes for the call).
  for (bool may_wake = true; !lease; may_wake = false) {
    {
      Lock lock(table_.mu);
      bool wake;
      auto found = CallableLocked(id, may_wake, &wake);
      if (!found.ok()) co_return found.error();
      if (!wake) {
        const Entry& e = **found;
        if (req.user.empty()) req.user = e.rec.user;  // the sandbox's default
        areq.env = ExecEnv(e, req.env, req.as_root(), &areq.self_env);
        lease = LeaseLocked(*found);
        ++execs_;
        auto t = types_.Find(e.rec.type);
        if (t.ok()) usd_per_hour = t->usd_per_hour;
      }
    }
    if (!lease)
      if (Status st = co_await Wake(id); !st.ok()) co_return st.error();
  }
  areq.argv = req.argv;
  areq.cwd = !req.cwd.empty() ? req.cwd : req.as_root() ? opts_.default_cwd : "";
  if (!req.as_root()) areq.user = req.user;
  areq.timeout_ms = req.timeout_seconds * 1000;
  areq.stdout_cap = areq.stderr_cap = opts_.output_cap;
  areq.keepalive_ms = opts_.keepalive_ms;
  areq.stdin_open = req.stdin_data.has_value();
  FaultPoint("exec.started");
  // Arguments are named locals: g++ 12 may destroy a temporary made inside a co_await
  // expression twice.
  std::string stdin_data = req.stdin_data.value_or("");
  std::shared_ptr<CancelSignal> cancel = req.cancel;
  auto res = co_await agent::Exec(ex, lease->addr(), std::move(areq), std::move(stdin_data), on_output, 10000, cancel);
  lease.reset();  // the exec's end: no lock (the counters are atomic)
  if (!res.ok()) co_return res.error().Wrap("exec in " + id);
  ExecResult out;
  out.exit = *res;
  int64_t total_us = SteadyUs() - (req.arrival_us ? req.arrival_us : SteadyUs());
  out.execute_ms_exact = res->execute_us / 1000.0;
  out.queue_ms_exact = std::max<double>(0, (total_us - res->execute_us) / 1000.0);
  out.execute_ms = res->execute_us / 1000;
  out.queue_ms = static_cast<int64_t>(out.queue_ms_exact);
  out.cost_usd = CostUsd(res->execute_us / 1000, usd_per_hour);
  lat_.exec.ObserveMs(total_us / 1000.0);
  co_return out;
}

}  // namespace sbx::core
