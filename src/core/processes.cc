// ProcessTable: starting background processes, their output rings, stdin, signals and
// resizes. Attaching to kept processes again is in process_attach.cc.
#include "core/processes.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "core/process_entry.h"

namespace sbx::core {

namespace asio = boost::asio;

namespace {
// Stdin queued for a process and not yet written to its keeper: past it, stdin waits (503).
constexpr uint64_t kMaxQueuedStdin = 8 << 20;
}  // namespace
using asio::use_awaitable;
using boost::system::error_code;
using nlohmann::json;

ProcessTable::ProcessTable(SandboxManager* manager, size_t ring_bytes, int max_per_sandbox)
    : manager_(manager), ring_bytes_(ring_bytes), max_per_sandbox_(max_per_sandbox) {}

ProcessTable::~ProcessTable() = default;

void ProcessTable::Remember(const std::string& sandbox, const std::shared_ptr<Proc>& p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& mine = procs_[sandbox];
  mine[p->info.pid] = p;  // a pid used again replaces the old, exited record
  // Forget the oldest exited ones past the limit.
  while (static_cast<int>(mine.size()) > max_per_sandbox_) {
    int64_t oldest = -1, oldest_ms = INT64_MAX;
    for (auto& [pid, q] : mine) {
      std::lock_guard<std::mutex> plock(q->mu);
      if (!q->info.running && q->info.ended_ms < oldest_ms) {
        oldest = pid;
        oldest_ms = q->info.ended_ms;
      }
    }
    if (oldest < 0) break;
    mine.erase(oldest);
  }
}

asio::awaitable<Result<ProcessInfo>> ProcessTable::Start(asio::any_io_executor ex, std::string sandbox,
                                                         ExecRequest req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    int running = 0;
    for (auto& [pid, p] : procs_[sandbox]) {
      std::lock_guard<std::mutex> plock(p->mu);
      running += p->info.running;
    }
    if (running >= max_per_sandbox_)
      co_return MakeError(Code::kResourceExhausted, "sandbox " + sandbox + " already runs " + std::to_string(running) +
                                                        " background processes (the limit)");
  }
  ExecRequest preq = req;
  auto prep = co_await manager_->PrepareProcess(sandbox, std::move(preq));
  if (!prep.ok()) co_return prep.error();
  auto p = std::make_shared<Proc>(sandbox, asio::make_strand(ex), ring_bytes_);
  p->lease = prep->lease;
  p->info.cmd = req.argv;
  p->info.cwd = prep->req.cwd;
  p->info.user = prep->req.user;
  p->info.tty = req.tty;
  p->info.started_ms = WallMs();
  agent::DialerPtr addr = p->lease->addr();
  auto keeps = co_await AgentKeeps(ex, sandbox, addr);
  if (!keeps.ok()) co_return keeps.error();
  p->info.kept = p->info.attached = *keeps;
  auto st = co_await p->conn->Open(addr);
  if (!st.ok()) co_return st.error();
  if (p->info.kept) {
    std::string start = R"({"ring_bytes":)" + std::to_string(ring_bytes_) + R"(,"exec":)" + prep->req.ToJson() + "}";
    st = co_await p->conn->Send(agent::FrameType::kProcStart, std::move(start));
  } else {
    std::string exec = prep->req.ToJson();
    st = co_await p->conn->Send(agent::FrameType::kExec, std::move(exec));
  }
  if (!st.ok()) co_return st.error();
  // The pid comes first if the command started; otherwise its failure, as an exec tells it.
  std::string failure;
  while (true) {
    auto f = co_await p->conn->Recv();
    if (!f.ok()) co_return f.error().Wrap("starting the process");
    if (f->type == agent::FrameType::kResult) {
      auto j = json::parse(f->payload, nullptr, false);
      if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer())
        co_return MakeError(Code::kInternal, "the sandbox's agent sent a malformed start answer");
      p->info.pid = j["pid"].get<int64_t>();
      // Where it started: the agent chose the user's home, or / (an older agent says nothing).
      if (j.contains("cwd") && j["cwd"].is_string() && !j["cwd"].get<std::string>().empty())
        p->info.cwd = j["cwd"].get<std::string>();
      break;
    }
    if ((f->type == agent::FrameType::kStderr || f->type == agent::FrameType::kStdout) && failure.size() < 4096)
      failure += f->payload;
    if (f->type == agent::FrameType::kExit) {
      while (!failure.empty() && failure.back() == '\n') failure.pop_back();
      co_return MakeError(Code::kInvalidArgument, "the process did not start: " + (failure.empty() ? std::string("unknown") : failure));
    }
  }
  ProcessInfo shown = p->info;
  Remember(sandbox, p);
  asio::co_spawn(p->strand, ReadLoop(p), asio::detached);
  co_return shown;
}

Status ProcessTable::FollowedLocked(const Proc& p) {
  if (p.info.kept && !p.info.attached)
    return MakeError(Code::kFailedPrecondition, "process " + std::to_string(p.info.pid) +
                                                    " is not followed by sbxd now (its sandbox is paused, or sbxd is "
                                                    "connecting to it again); try again after a resume");
  return OkStatus();
}

void ProcessTable::EndLocked(Proc& p, const std::string& error) {
  p.info.running = false;
  p.info.attached = false;
  p.info.stdin_open = false;
  p.info.ended_ms = WallMs();
  p.info.error = error;
}

asio::awaitable<void> ProcessTable::ReadLoop(std::shared_ptr<Proc> p) {
  std::string lost;
  std::shared_ptr<agent::Conn> conn = p->conn;  // this reader's connection
  while (true) {
    auto f = co_await conn->Recv();
    if (!f.ok()) {
      lost = f.error().message;
      break;
    }
    if (f->type == agent::FrameType::kStdout || f->type == agent::FrameType::kStderr) {
      std::lock_guard<std::mutex> lock(p->mu);
      uint64_t seq = p->info.kept ? p->recv_seq++ : p->info.next_seq;
      if (seq < p->info.next_seq) continue;  // already held (a replay overlapping the cache)
      OutputChunk c{seq, f->type == agent::FrameType::kStdout ? 1 : 2, std::move(f->payload)};
      p->info.next_seq = seq + 1;
      p->ring_size += c.data.size();
      p->ring.push_back(std::move(c));
      while (p->ring_size > p->ring_cap && p->ring.size() > 1) {
        p->ring_size -= p->ring.front().data.size();
        p->ring.pop_front();
      }
      p->info.first_seq = p->ring.front().seq;
      WakeWaiters(*p);
      continue;
    }
    if (f->type == agent::FrameType::kExit) {
      auto e = agent::ExitInfo::FromJson(f->payload);
      {
        std::lock_guard<std::mutex> lock(p->mu);
        EndLocked(*p, e.ok() ? std::string() : e.error().message);
        if (e.ok()) {
          p->info.exit_code = e->exit_code;
          p->info.signal = e->signal;
        }
      }
      if (p->info.kept) {
        // The keeper may go: sbxd holds everything now. The connection closes once the
        // release is written.
        p->close_when_written = true;
        Queue(p, agent::EncodeFrame(agent::FrameType::kProcRelease, ""));
        WakeWaiters(*p);
        p->lease.reset();
        co_return;
      }
      break;
    }
    // Keep-alives and anything else: nothing to keep.
  }
  p->lease.reset();  // no longer activity for the idle policy
  error_code ignored;
  conn->socket().close(ignored);
  bool kept, ended;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    kept = p->info.kept;
    ended = !p->info.running;
    p->info.attached = false;
  }
  if (kept && !ended && p->detaching) {
    // A hibernate closed it: the keeper runs on (and into the checkpoint).
    p->detaching = false;
    if (p->detached) p->detached->set_value();
    p->detached.reset();
    co_return;
  }
  if (kept && !ended) {
    // The connection broke, maybe not the process: attach again if the sandbox still
    // runs (a sandbox being stopped is busy, and the attach fails at once).
    // At most one attach a second: a connection that keeps breaking costs no busy loop.
    if (int64_t since_last = WallMs() - p->last_attach_ms; since_last < 1000) {
      asio::steady_timer wait(p->strand, std::chrono::milliseconds(1000 - since_last));
      error_code ec;
      co_await wait.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    uint64_t since;
    {
      std::lock_guard<std::mutex> lock(p->mu);
      since = p->info.next_seq;
    }
    Status st = co_await AttachOnStrand(p, since);
    if (st.ok()) co_return;
    lost = st.error().message;
  }
  if (!ended) {
    std::lock_guard<std::mutex> lock(p->mu);
    EndLocked(*p, "the connection to the sandbox's agent ended (the sandbox stopped or was deleted): " + lost);
  }
  WakeWaiters(*p);
}

void ProcessTable::WakeWaiters(Proc& p) {
  for (auto& t : p.waiters) t->cancel();
  p.waiters.clear();
}

asio::awaitable<void> ProcessTable::WaitOutput(const std::string& sandbox, int64_t pid, uint64_t since,
                                               std::chrono::milliseconds max_wait) {
  auto found = Find(sandbox, pid);
  if (!found.ok()) co_return;
  // The wait runs on the process's strand, where its reader appends output: no wake is
  // lost between the check and the wait.
  std::shared_ptr<Proc> p = *found;
  co_await asio::co_spawn(p->strand, WaitOnStrand(p, since, max_wait), asio::use_awaitable);
}

asio::awaitable<void> ProcessTable::WaitOnStrand(std::shared_ptr<Proc> p, uint64_t since,
                                                 std::chrono::milliseconds max_wait) {
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->info.next_seq > since || !p->info.running) co_return;
  }
  auto t = std::make_shared<asio::steady_timer>(p->strand, max_wait);
  p->waiters.push_back(t);
  error_code ignored;
  co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  std::erase(p->waiters, t);
}

asio::awaitable<void> ProcessTable::WriteLoop(std::shared_ptr<Proc> p) {
  std::shared_ptr<agent::Conn> conn = p->conn;  // this writer's connection
  while (!p->outq.empty()) {
    std::string frame = std::move(p->outq.front());
    p->outq.pop_front();
    error_code ec;
    co_await asio::async_write(conn->socket(), asio::buffer(frame), asio::redirect_error(use_awaitable, ec));
    p->queued_bytes -= frame.size();
    if (ec) {
      for (const auto& rest : p->outq) p->queued_bytes -= rest.size();
      p->outq.clear();
      break;
    }
  }
  p->writing = false;
  if (p->close_when_written) {
    error_code ignored;
    conn->socket().close(ignored);
  }
}

void ProcessTable::Queue(const std::shared_ptr<Proc>& p, std::string frame) {
  p->queued_bytes += frame.size();
  asio::post(p->strand, [p, frame = std::move(frame)]() mutable {
    p->outq.push_back(std::move(frame));
    if (!p->writing) {
      p->writing = true;
      asio::co_spawn(p->strand, WriteLoop(p), asio::detached);
    }
  });
}

Result<std::shared_ptr<ProcessTable::Proc>> ProcessTable::Find(const std::string& sandbox, int64_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = procs_.find(sandbox);
  if (s != procs_.end()) {
    auto it = s->second.find(pid);
    if (it != s->second.end()) return it->second;
  }
  return MakeError(Code::kNotFound, "no process " + std::to_string(pid) + " in sandbox " + sandbox);
}

Result<std::vector<ProcessInfo>> ProcessTable::List(const std::string& sandbox) {
  std::vector<ProcessInfo> out;
  std::lock_guard<std::mutex> lock(mu_);
  auto s = procs_.find(sandbox);
  if (s == procs_.end()) return out;
  for (auto& [pid, p] : s->second) {
    std::lock_guard<std::mutex> plock(p->mu);
    out.push_back(p->info);
  }
  return out;
}

Result<ProcessInfo> ProcessTable::Get(const std::string& sandbox, int64_t pid) {
  SBX_ASSIGN_OR_RETURN(auto p, Find(sandbox, pid));
  std::lock_guard<std::mutex> lock(p->mu);
  return p->info;
}

Status ProcessTable::Signal(const std::string& sandbox, int64_t pid, int sig) {
  if (sig < 1 || sig > 64) return MakeError(Code::kInvalidArgument, "signal must be between 1 and 64");
  SBX_ASSIGN_OR_RETURN(auto p, Find(sandbox, pid));
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->info.running) return MakeError(Code::kFailedPrecondition, "process " + std::to_string(pid) + " has ended");
    SBX_RETURN_IF_ERROR(FollowedLocked(*p));
  }
  Queue(p, agent::EncodeFrame(agent::FrameType::kSignal, json{{"signal", sig}}.dump()));
  return OkStatus();
}

Status ProcessTable::Stdin(const std::string& sandbox, int64_t pid, const std::string& data, bool eof) {
  SBX_ASSIGN_OR_RETURN(auto p, Find(sandbox, pid));
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->info.running) return MakeError(Code::kFailedPrecondition, "process " + std::to_string(pid) + " has ended");
    if (!p->info.stdin_open) return MakeError(Code::kFailedPrecondition, "the stdin of process " + std::to_string(pid) + " is closed");
    SBX_RETURN_IF_ERROR(FollowedLocked(*p));
    // A process that does not read: what it has not taken yet stays under the cap (one
    // request of any size goes when nothing waits).
    const uint64_t waiting = p->queued_bytes.load();
    if (waiting > 0 && waiting + data.size() > kMaxQueuedStdin)
      return MakeError(Code::kUnavailable, "process " + std::to_string(pid) + " has " +
                                               std::to_string(kMaxQueuedStdin >> 20) +
                                               " MiB of stdin not taken yet; try again");
    if (eof) p->info.stdin_open = false;
  }
  std::string frames;
  for (size_t off = 0; off < data.size(); off += agent::kMaxPayload)
    frames += agent::EncodeFrame(agent::FrameType::kStdin, std::string_view(data).substr(off, agent::kMaxPayload));
  if (eof) frames += agent::EncodeFrame(agent::FrameType::kStdinEof, "");
  if (!frames.empty()) Queue(p, std::move(frames));
  return OkStatus();
}

Status ProcessTable::Resize(const std::string& sandbox, int64_t pid, int cols, int rows) {
  if (cols < 1 || cols > 10000 || rows < 1 || rows > 10000)
    return MakeError(Code::kInvalidArgument, "cols and rows must be between 1 and 10000");
  SBX_ASSIGN_OR_RETURN(auto p, Find(sandbox, pid));
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->info.tty) return MakeError(Code::kFailedPrecondition, "process " + std::to_string(pid) + " has no terminal");
    if (!p->info.running) return MakeError(Code::kFailedPrecondition, "process " + std::to_string(pid) + " has ended");
    SBX_RETURN_IF_ERROR(FollowedLocked(*p));
  }
  Queue(p, agent::EncodeFrame(agent::FrameType::kResize, json{{"cols", cols}, {"rows", rows}}.dump()));
  return OkStatus();
}

Result<OutputRead> ProcessTable::Read(const std::string& sandbox, int64_t pid, uint64_t since, size_t max_bytes) {
  SBX_ASSIGN_OR_RETURN(auto p, Find(sandbox, pid));
  OutputRead out;
  std::lock_guard<std::mutex> lock(p->mu);
  out.info = p->info;
  uint64_t first = p->ring.empty() ? p->info.next_seq : p->ring.front().seq;
  if (since < first) {
    out.missed_from = since;
    out.missed_to = first;
  }
  size_t bytes = 0;
  for (const auto& c : p->ring) {
    if (c.seq < since) continue;
    if (bytes > 0 && bytes + c.data.size() > max_bytes) break;
    bytes += c.data.size();
    out.chunks.push_back(c);
  }
  return out;
}

void ProcessTable::Forget(const std::string& sandbox) {
  std::map<int64_t, std::shared_ptr<Proc>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listed_.erase(sandbox);
    keeping_agents_.erase(sandbox);
    auto s = procs_.find(sandbox);
    if (s == procs_.end()) return;
    gone = std::move(s->second);
    procs_.erase(s);
  }
  for (auto& entry : gone)
    asio::post(entry.second->strand, [p = entry.second] {
      p->detaching = true;  // its reader must not attach again
      error_code ignored;
      p->conn->socket().close(ignored);  // the sandbox goes, and its processes with it
    });
}

}  // namespace sbx::core
