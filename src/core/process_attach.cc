// Background processes that the agent keeps: attaching to their keepers again (at sbxd's
// start, after a restore, after a lost connection) and letting go of them around a
// hibernate. The rest of ProcessTable is in processes.cc.
#include <utility>  // before Boost.Asio (its awaitable.hpp needs std::exchange)

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "base/log.h"
#include "core/process_entry.h"

namespace sbx::core {

namespace asio = boost::asio;
using asio::use_awaitable;
using boost::system::error_code;
using nlohmann::json;

asio::awaitable<Result<bool>> ProcessTable::AgentKeeps(asio::any_io_executor ex, const std::string& sandbox,
                                                       const agent::DialerPtr& addr) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keeping_agents_.find(sandbox);
    if (it != keeping_agents_.end() && it->second.lock() == addr) co_return true;
  }
  auto info = co_await agent::Ping(ex, addr);
  if (!info.ok()) co_return info.error();
  if (!info->Has("procs")) co_return false;
  std::lock_guard<std::mutex> lock(mu_);
  keeping_agents_[sandbox] = addr;
  co_return true;
}

asio::awaitable<Status> ProcessTable::AttachOnStrand(std::shared_ptr<Proc> p, uint64_t since) {
  // One attach at a time, and none while a reader follows: two followers of one keeper
  // would take its connection from each other.
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->attaching || p->info.attached) co_return OkStatus();
  }
  p->attaching = true;
  p->last_attach_ms = WallMs();
  struct Done {
    Proc* p;
    ~Done() { p->attaching = false; }
  } done{p.get()};
  auto lease = manager_->LeaseAgent(p->sandbox);
  if (!lease.ok()) co_return lease.error();
  auto conn = std::make_shared<agent::Conn>(p->strand);
  agent::DialerPtr addr = (*lease)->addr();
  if (Status st = co_await conn->Open(addr); !st.ok()) co_return st;
  int64_t pid;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    pid = p->info.pid;
  }
  std::string ask = json{{"pid", pid}, {"since", since}}.dump();
  if (Status st = co_await conn->Send(agent::FrameType::kProcAttach, std::move(ask)); !st.ok()) co_return st;
  auto answer = co_await conn->RecvResult();
  if (!answer.ok()) co_return answer.error();
  auto j = json::parse(*answer, nullptr, false);
  if (!j.is_object() || !j["from"].is_number_unsigned() || !j["next_seq"].is_number_unsigned())
    co_return MakeError(Code::kInternal, "the sandbox's agent sent a malformed attach answer");
  {
    std::lock_guard<std::mutex> lock(p->mu);
    uint64_t from = j["from"].get<uint64_t>();
    if (from > p->info.next_seq) {
      // Output between what sbxd holds and what the keeper still has is lost: the cache
      // starts again at `from`, so a reader asking for older output is told of the gap.
      p->ring.clear();
      p->ring_size = 0;
      p->info.next_seq = p->info.first_seq = from;
    }
    p->recv_seq = from;
    p->info.attached = true;
    p->info.running = true;
    p->info.error.clear();
    p->info.stdin_open = j.contains("stdin_open") && j["stdin_open"].is_boolean() && j["stdin_open"].get<bool>();
  }
  p->conn = std::move(conn);
  p->lease = *lease;
  p->close_when_written = false;
  if (!p->outq.empty() && !p->writing) {
    p->writing = true;
    asio::co_spawn(p->strand, WriteLoop(p), asio::detached);
  }
  asio::co_spawn(p->strand, ReadLoop(p), asio::detached);
  co_return OkStatus();
}

void ProcessTable::ReattachAll(asio::any_io_executor ex) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ex_ = ex;
  }
  core::ListFilter running;
  running.state = "running";
  auto list = manager_->List(running);
  if (!list.ok()) return;
  // All at once: a sandbox whose agent is stuck costs its own deadline, not everyone's.
  std::vector<std::future<void>> waits;
  for (const auto& v : *list) waits.push_back(asio::co_spawn(ex, ReattachAsync(v.rec.id, true), asio::use_future));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto& w : waits) w.wait_until(deadline);
}

asio::awaitable<void> ProcessTable::ReattachAsync(std::string sandbox, bool force) {
  std::vector<std::shared_ptr<Proc>> cached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ex_ || !WantsListLocked(sandbox, force)) co_return;
    for (auto& [pid, p] : procs_[sandbox]) {
      std::lock_guard<std::mutex> plock(p->mu);
      if (p->info.kept) cached.push_back(p);
    }
  }
  auto lease = manager_->LeaseAgent(sandbox);
  if (!lease.ok()) co_return;  // not running: its processes wait for a resume
  agent::DialerPtr addr = (*lease)->addr();
  auto keeps = co_await AgentKeeps(*ex_, sandbox, addr);
  if (!keeps.ok() || !*keeps) co_return;
  agent::Conn conn(*ex_);
  // (No co_await inside a conditional expression: g++ 12 miscompiles it.)
  Result<std::string> answer = MakeError(Code::kUnavailable, "not asked");
  Status st = co_await conn.Open(addr);
  if (st.ok()) {
    std::string none;
    st = co_await conn.Send(agent::FrameType::kProcList, std::move(none));
  }
  if (st.ok()) {
    auto got = co_await conn.RecvResult();
    answer = std::move(got);
  } else {
    answer = st.error();
  }
  json j;
  if (answer.ok()) j = json::parse(*answer, nullptr, false);
  if (!j.is_object() || !j["processes"].is_array()) {
    SBX_LOG(kWarn) << "cannot list the background processes of " << sandbox << ": "
                   << (answer.ok() ? "a malformed answer: " + answer->substr(0, 200) : answer.error().message);
    co_return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    listed_.insert(sandbox);
  }
  std::set<int64_t> alive;
  for (const auto& k : j["processes"]) {
    // What the sandbox says is checked like any input: its code may squat a keeper's name.
    if (!k.is_object() || !k.contains("pid") || !k["pid"].is_number_integer()) continue;
    int64_t pid = k["pid"].get<int64_t>();
    if (pid < 1 || pid > (int64_t{1} << 22)) continue;
    alive.insert(pid);
    std::shared_ptr<Proc> p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& mine = procs_[sandbox];
      auto it = mine.find(pid);
      if (it != mine.end() && it->second->info.kept) p = it->second;
    }
    uint64_t since = 0;
    bool fresh = false;
    if (p) {
      std::lock_guard<std::mutex> plock(p->mu);
      if (p->info.attached) continue;
      since = p->info.next_seq;
    } else {
      // Started before sbxd's restart: known from its keeper only. No more than a
      // sandbox may run (each costs sbxd a ring).
      int running = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [other, q] : procs_[sandbox]) {
          std::lock_guard<std::mutex> plock(q->mu);
          running += q->info.running;
        }
      }
      if (running >= max_per_sandbox_) {
        SBX_LOG(kWarn) << "sandbox " << sandbox << " lists more background processes than the "
                       << max_per_sandbox_ << " it may run; process " << pid << " is not followed";
        continue;
      }
      p = std::make_shared<Proc>(sandbox, asio::make_strand(*ex_), ring_bytes_);
      p->info.pid = pid;
      p->info.kept = true;
      try {
        p->info.cmd = k.value("argv", std::vector<std::string>{});
        p->info.cwd = k.value("cwd", std::string());
        p->info.user = k.value("user", std::string());
        p->info.tty = k.value("tty", false);
        p->info.started_ms = k.value("started_ms", int64_t{0});
      } catch (const std::exception&) {
        continue;  // a malformed entry: not ours to follow
      }
      fresh = true;
    }
    auto attach = AttachOnStrand(p, since);
    Status st = co_await asio::co_spawn(p->strand, std::move(attach), use_awaitable);
    // One known only from the list is remembered once it is followed: a keeper that
    // cannot be attached to (or something squatting its name) leaves no entry behind.
    if (fresh && st.ok()) Remember(sandbox, p);
  }
  // What sbxd followed but the agent no longer keeps ended while nobody watched (its
  // sandbox restarted, say): its end is unknown. Only from a complete list (a keeper
  // that did not answer in time, or a list cut to fit, says nothing of the others).
  const bool complete = !j.contains("complete") || (j["complete"].is_boolean() && j["complete"].get<bool>());
  for (auto& p : complete ? cached : std::vector<std::shared_ptr<Proc>>{}) {
    std::lock_guard<std::mutex> plock(p->mu);
    if (p->info.running && !p->info.attached && !alive.count(p->info.pid)) {
      EndLocked(*p, "the sandbox's agent no longer keeps this process (the sandbox restarted)");
      asio::post(p->strand, [p] { WakeWaiters(*p); });
    }
  }
}

bool ProcessTable::WantsListLocked(const std::string& sandbox, bool force) {
  if (force || !listed_.count(sandbox)) return true;
  auto s = procs_.find(sandbox);
  if (s == procs_.end()) return false;
  for (auto& [pid, p] : s->second) {
    std::lock_guard<std::mutex> plock(p->mu);
    if (p->info.kept && p->info.running && !p->info.attached) return true;
  }
  return false;
}

void ProcessTable::Reattach(const std::string& sandbox, bool force) {
  std::optional<asio::any_io_executor> ex;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ex_ || !WantsListLocked(sandbox, force)) return;  // the common case: no round trip
    ex = ex_;
  }
  auto done = asio::co_spawn(*ex, ReattachAsync(sandbox, force), asio::use_future);
  done.wait_for(std::chrono::seconds(15));
}

void ProcessTable::Detach(const std::string& sandbox) {
  std::vector<std::shared_ptr<Proc>> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = procs_.find(sandbox);
    if (s == procs_.end()) return;
    for (auto& [pid, p] : s->second) {
      std::lock_guard<std::mutex> plock(p->mu);
      if (p->info.kept && p->info.attached) kept.push_back(p);
    }
  }
  std::vector<std::future<void>> waits;
  for (auto& p : kept) {
    auto pr = std::make_shared<std::promise<void>>();
    waits.push_back(pr->get_future());
    asio::post(p->strand, [p, pr] {
      bool attached;
      {
        std::lock_guard<std::mutex> lock(p->mu);
        attached = p->info.attached && p->info.running;
      }
      if (!attached) {
        pr->set_value();
        return;
      }
      p->detaching = true;
      p->detached = pr;
      error_code ignored;
      p->conn->socket().close(ignored);  // its reader stops and tells `pr`
    });
  }
  for (auto& w : waits) w.wait_for(std::chrono::seconds(5));
}

void ProcessTable::EndDetached(const std::string& sandbox, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = procs_.find(sandbox);
  if (s == procs_.end()) return;
  for (auto& [pid, p] : s->second) {
    std::lock_guard<std::mutex> plock(p->mu);
    if (!p->info.kept || !p->info.running || p->info.attached) continue;
    EndLocked(*p, reason);
    asio::post(p->strand, [q = p] { WakeWaiters(*q); });
  }
}

}  // namespace sbx::core
