// ProcessTable: background processes of sandboxes. Each runs through one agent
// connection that sbxd holds (not the HTTP request that started it), so it outlives that
// request; its output goes into a capped ring that any number of readers replay and follow
// by sequence number. Thread-safe; the socket work of a process runs on its own strand.
//
// Where the agent has the feature "procs", the agent keeps the process (its keeper holds
// the pipes and a ring of its own, agent/process_keeper.h) and this table is a cache of
// what sbxd follows: a process then outlives sbxd's connection, and so sbxd itself. sbxd
// lists and attaches again at its start (ReattachAll), after a restore (Reattach), and
// after a lost connection; a hibernate closes the connections first (Detach). With an
// older agent a process is tied to its connection, as before the feature.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/requests.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

struct ProcessInfo {
  int64_t pid = 0;  // inside the sandbox
  std::vector<std::string> cmd;
  std::string cwd;   // empty: the user's home (or /)
  std::string user;  // empty: root
  bool running = true;
  std::optional<int> exit_code;  // set once it exited (none if the connection was lost)
  int signal = 0;
  std::string error;  // why its end is unknown (the sandbox stopped, sbxd lost the agent)
  int64_t started_ms = 0, ended_ms = 0;
  uint64_t next_seq = 0;   // the sequence number the next output chunk will get
  uint64_t first_seq = 0;  // the oldest chunk still in the ring
  bool stdin_open = true;
  bool tty = false;
  bool kept = false;      // the sandbox's agent keeps it (it outlives sbxd's connections)
  bool attached = false;  // sbxd follows it now
};

struct OutputChunk {
  uint64_t seq = 0;
  int stream = 1;  // 1 stdout, 2 stderr
  std::string data;
};

struct OutputRead {
  std::vector<OutputChunk> chunks;  // seq >= since, oldest first
  uint64_t missed_from = 0, missed_to = 0;  // [from, to) fell out of the ring before this read
  ProcessInfo info;
};

class ProcessTable {
 public:
  // ring_bytes: output kept per process; max_per_sandbox: processes remembered per sandbox
  // (running ones beyond it are refused, exited ones are forgotten oldest first).
  ProcessTable(SandboxManager* manager, size_t ring_bytes = 1 << 20, int max_per_sandbox = 64);
  ~ProcessTable();

  boost::asio::awaitable<Result<ProcessInfo>> Start(boost::asio::any_io_executor ex, std::string sandbox,
                                                    ExecRequest req);
  Result<std::vector<ProcessInfo>> List(const std::string& sandbox);
  Result<ProcessInfo> Get(const std::string& sandbox, int64_t pid);
  // Queues a signal to the process's group, or stdin bytes (and/or its end), in order.
  Status Signal(const std::string& sandbox, int64_t pid, int sig);
  Status Stdin(const std::string& sandbox, int64_t pid, const std::string& data, bool eof);
  // A new size for a tty process's terminal.
  Status Resize(const std::string& sandbox, int64_t pid, int cols, int rows);
  // What is in the ring from `since` on (at most max_bytes of it).
  Result<OutputRead> Read(const std::string& sandbox, int64_t pid, uint64_t since, size_t max_bytes);
  // Returns when the process has output at or after `since`, or has ended, or `max_wait`
  // has passed (an event: the process's reader wakes it).
  boost::asio::awaitable<void> WaitOutput(const std::string& sandbox, int64_t pid, uint64_t since,
                                          std::chrono::milliseconds max_wait);
  // At sbxd's start: the processes that the agents of running sandboxes kept while sbxd
  // was away, attached again (their rings replayed). Later reattaches run on `ex`.
  // Blocking: sbxd calls it before it serves, with `ex` running on another thread.
  void ReattachAll(boost::asio::any_io_executor ex);
  // Before a hibernate: closes sbxd's connections to the sandbox's kept processes (they
  // run on) and drops their leases. Blocking: call it off the io threads.
  void Detach(const std::string& sandbox);
  // The sandbox's agent is back (a resume, a failed hibernate): lists its kept processes
  // and attaches those sbxd does not follow. Without `force`, only when something is
  // detached or the sandbox was not listed since sbxd started. Blocking, within seconds.
  void Reattach(const std::string& sandbox, bool force);
  // The sandbox stopped: kept processes sbxd does not follow now (let go of around a
  // hibernate) end with `reason`. Never blocks; safe under the sandbox table's lock.
  void EndDetached(const std::string& sandbox, const std::string& reason);
  // Drops what is remembered of a deleted sandbox's processes (SandboxManager::Delete
  // calls it for every delete: the API's, E2B's, a TTL's). Never blocks on the sandbox
  // table's lock.
  void Forget(const std::string& sandbox);
  size_t ring_bytes() const { return ring_bytes_; }

 private:
  struct Proc;
  Result<std::shared_ptr<Proc>> Find(const std::string& sandbox, int64_t pid);
  boost::asio::awaitable<void> ReadLoop(std::shared_ptr<Proc> p);
  // On the process's strand: a new connection to its keeper, replaying from `since`.
  boost::asio::awaitable<Status> AttachOnStrand(std::shared_ptr<Proc> p, uint64_t since);
  boost::asio::awaitable<void> ReattachAsync(std::string sandbox, bool force);
  // Whether the sandbox's agent keeps processes (asked once per agent instance).
  boost::asio::awaitable<Result<bool>> AgentKeeps(boost::asio::any_io_executor ex, const std::string& sandbox,
                                                  const agent::DialerPtr& addr);
  void Remember(const std::string& sandbox, const std::shared_ptr<Proc>& p);
  // Whether the sandbox's kept processes must be listed (mu_ held).
  bool WantsListLocked(const std::string& sandbox, bool force);
  static boost::asio::awaitable<void> WriteLoop(std::shared_ptr<Proc> p);
  static boost::asio::awaitable<void> WaitOnStrand(std::shared_ptr<Proc> p, uint64_t since,
                                                   std::chrono::milliseconds max_wait);
  static void WakeWaiters(Proc& p);
  static void EndLocked(Proc& p, const std::string& error);
  // 409 while a kept process is not followed (its sandbox hibernated, a reattach pending).
  static Status FollowedLocked(const Proc& p);
  void Queue(const std::shared_ptr<Proc>& p, std::string frame);

  SandboxManager* manager_;
  size_t ring_bytes_;
  int max_per_sandbox_;
  std::mutex mu_;
  std::map<std::string, std::map<int64_t, std::shared_ptr<Proc>>> procs_;  // sandbox -> pid -> proc
  std::set<std::string> listed_;  // sandboxes whose kept processes were listed since sbxd started
  // Agents known to keep processes, by sandbox (a new instance has a new dialer).
  std::map<std::string, std::weak_ptr<const agent::Dialer>> keeping_agents_;
  std::optional<boost::asio::any_io_executor> ex_;
};

}  // namespace sbx::core
