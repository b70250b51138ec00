// What core answers with: views of sandboxes and snapshots, an exec's result, and the
// lease on a running sandbox's agent that file, port and process operations hold.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "agent/client.h"
#include "storage/store.h"

namespace sbx::core {

struct ExecResult {
  agent::ExitInfo exit;
  int64_t queue_ms = 0;
  int64_t execute_ms = 0;
  double queue_ms_exact = 0;
  double execute_ms_exact = 0;
  double cost_usd = 0;
};

// A sandbox as the API shows it.
struct SandboxView {
  storage::SandboxRecord rec;
  double billed_seconds = 0;
  double cost_usd = 0;
  // Its network: its addresses while it has a link (else empty; IPv6 when sandboxes
  // have it), and the bytes it sent and received through its links so far.
  std::string address, address6;
  uint64_t tx_bytes = 0, rx_bytes = 0;
  int network_mbps = 0;  // its type's limit each way (0: none)
  std::string accel;     // a VM wall's accelerator (kvm, tcg); empty on other walls
};

// A running sandbox's agent, held for one file, process or port operation. While it is
// held the sandbox counts as busy for its idle policy. Any thread may drop it.
class AgentLease {
 public:
  AgentLease(agent::DialerPtr addr, uint64_t disk_bytes, std::string user, std::function<void()> release)
      : addr_(std::move(addr)), disk_bytes_(disk_bytes), user_(std::move(user)), release_(std::move(release)) {}
  ~AgentLease() {
    if (release_) release_();
  }
  AgentLease(const AgentLease&) = delete;
  AgentLease& operator=(const AgentLease&) = delete;
  const agent::DialerPtr& addr() const { return addr_; }
  uint64_t disk_bytes() const { return disk_bytes_; }  // the sandbox's disk limit
  // Who the sandbox's file operations run as when a call names no one ("" or "root": root).
  const std::string& user() const { return user_; }

 private:
  agent::DialerPtr addr_;
  uint64_t disk_bytes_;
  std::string user_;
  std::function<void()> release_;
};

// A background process about to start: the agent's request and the lease on the sandbox,
// held for as long as the process runs.
struct PreparedProcess {
  std::shared_ptr<AgentLease> lease;
  agent::ExecRequest req;
};

struct SnapshotView {
  storage::SnapshotRecord rec;
};

// `GET /v1/sandboxes/{id}/stats`: what a running or frozen sandbox uses now, and its
// limits. Counters, not rates: a reader takes two and divides (the CLI does).
struct SandboxStats {
  std::string id, state;
  int64_t read_ms = 0;  // wall clock of the reading
  uint64_t cpu_ns = 0;  // CPU time so far
  double cpus = 0;      // the CPU limit, in cores
  uint64_t memory_bytes = 0, memory_limit_bytes = 0;
  uint64_t processes = 0, pids_limit = 0;
  uint64_t disk_limit_bytes = 0;
};

struct ListFilter {
  std::string name;
  std::string state;
  std::map<std::string, std::string> metadata;
};

}  // namespace sbx::core
