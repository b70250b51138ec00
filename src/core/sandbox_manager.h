// SandboxManager: decides. It owns the sandboxes' state machine
// (creating -> running <-> stopped -> deleted; error), applies policy (types, TTL, names),
// persists every transition in SQLite before acting, and drives the runtime and the agent.
// Thread-safe: blocking calls (Create, Start, Stop) run on the caller's thread (the API
// runs them on its blocking pool); Exec is a coroutine for the io threads.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/client.h"
#include "base/metrics.h"
#include "core/requests.h"
#include "core/types.h"
#include "disks/disk_store.h"
#include "layers/images.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "core/store_budget.h"
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
};

// Billed compute over a time window.
struct UsageLine {
  std::string id, name, type;
  double seconds = 0, cost_usd = 0;
};
struct UsageReport {
  int64_t from_ms = 0, to_ms = 0;
  std::vector<UsageLine> sandboxes;                          // by first period in the window
  std::map<std::string, std::pair<double, double>> by_type;  // seconds, cost
  int64_t calls = 0;                                         // serverless calls
  double calls_usd = 0;
  double seconds = 0, compute_usd = 0, total_usd = 0;
};

// Limits on what the whole daemon holds (0: no limit). Live sandboxes are those creating,
// running or paused (a frozen sandbox keeps its memory); disk counts every sandbox's disk_mb.
struct Quotas {
  int max_sandboxes = 0;
  int64_t max_memory_mb = 0;
  int64_t max_disk_mb = 0;
};

// A running sandbox's agent, held for one file, process or port operation. While it is
// held the sandbox counts as busy for its idle policy. Any thread may drop it.
class AgentLease {
 public:
  AgentLease(agent::DialerPtr addr, uint64_t disk_bytes, std::function<void()> release)
      : addr_(std::move(addr)), disk_bytes_(disk_bytes), release_(std::move(release)) {}
  ~AgentLease() {
    if (release_) release_();
  }
  AgentLease(const AgentLease&) = delete;
  AgentLease& operator=(const AgentLease&) = delete;
  const agent::DialerPtr& addr() const { return addr_; }
  uint64_t disk_bytes() const { return disk_bytes_; }  // the sandbox's disk limit

 private:
  agent::DialerPtr addr_;
  uint64_t disk_bytes_;
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

struct ListFilter {
  std::string name;
  std::string state;
  std::map<std::string, std::string> metadata;
};

struct ManagerOptions {
  std::string data_dir;
  std::string default_image = "default";
  uint64_t output_cap = 16 << 20;
  // A streamed exec or process output sends a keep-alive after this long without output.
  int64_t keepalive_ms = 15000;
  int64_t default_ttl_seconds = 3600;
  int64_t max_ttl_seconds = 30 * 24 * 3600;
  int64_t max_exec_timeout_seconds = 24 * 3600;
  int teardown_threads = 2;
  std::string default_cwd = "/root";  // empty: the agent's own working directory
  std::map<std::string, std::string> base_env = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", "/root"},
      {"LANG", "C.UTF-8"},
      {"TERM", "xterm"}};
  // Warm pool: this many booted, warmed sandboxes are kept ready per image or snapshot
  // created from within the last pool_keep_ms (0: no pool).
  int pool_size = 0;
  double serverless_call_usd = 0.05 / 1000;  // price of one serverless call on a disk
  int64_t pool_keep_ms = 10 * 60 * 1000;
  Quotas quotas;
  // New work (create, start, snapshot, fork, disks) is refused with 503 while the data
  // dir's file system has less than this free.
  int64_t min_free_mb = 64;
  // The store (empty: none): its mount, size and overcommit ratio (core/store_budget.h).
  std::string store_dir;
  int64_t store_mb = 0;
  double store_overcommit = 0;
  // Idle policy: a sandbox using more than this share of one CPU is busy.
  double idle_cpu_threshold = 0.05;
  std::function<int64_t()> now_ms;  // wall clock (tests drive it); default: real time
  // 32 raw bytes: seals daemon secrets at rest and signs sandbox tokens. Empty: secrets
  // and tokens are off (unit tests).
  std::string secret_key;
};

class SandboxManager {
 public:
  SandboxManager(ManagerOptions opts, storage::Store* store, layers::ImageStore* images,
                 const runtime::Registry* runtimes, TypeTable types = TypeTable::Defaults());
  ~SandboxManager();

  // Disks become available to sandboxes (optional: unit tests run without).
  void AttachDisks(disks::DiskStore* disks) { disks_ = disks; }
  // Deletes a disk no sandbox uses (409 otherwise; waits briefly for teardowns).
  Status DeleteDisk(const std::string& id);
  // A fresh sandbox for one serverless call: the disk at /mnt/disk, TTL 10 minutes.
  Result<SandboxView> CreateForDiskCall(const std::string& disk_id, const std::string& image,
                                        const std::string& from);
  double serverless_call_usd() const { return opts_.serverless_call_usd; }
  // The shell that string commands of serverless calls run with: bash where the
  // sandbox's root has it, else /bin/sh.
  std::string ShellFor(const SandboxView& v) const;

  // Reconciles SQLite with the kernel: re-adopts live sandboxes, finishes interrupted
  // deletes, marks the rest `error`, and removes orphaned cgroups and directories.
  Status Recover();  // recovery.cc

  Result<SandboxView> Create(const CreateRequest& req);
  Result<SandboxView> Get(const std::string& id);
  Result<std::vector<SandboxView>> List(const ListFilter& filter);
  // Answers at once; the teardown runs on a background thread.
  Status Delete(const std::string& id);
  Result<SandboxView> Stop(const std::string& id);
  Result<SandboxView> Start(const std::string& id);
  // Pause with the cgroup freezer (mode "freeze": memory kept) or a checkpoint to disk
  // (mode "hibernate": CRIU, memory freed; refused while sbxd holds a connection into the
  // sandbox); idempotent. Billing stops while paused, and so does the TTL clock.
  Result<SandboxView> Pause(const std::string& id, const std::string& mode);
  Result<SandboxView> Resume(const std::string& id);
  // True if the sandbox was made `public`: its ports need no credentials.
  bool PortsArePublic(const std::string& id);
  // True if an exec must resume the sandbox first (paused, auto_resume on).
  bool WantsResume(const std::string& id);
  Result<SandboxView> Update(const std::string& id, const UpdateRequest& req);
  // An API call on the sandbox: activity for its idle policy.
  void Touch(const std::string& id);
  // Billed seconds and cost per sandbox, per type and in total, within [from, to).
  Result<UsageReport> Usage(int64_t from_ms, int64_t to_ms);
  // Daemon secrets: injected as env into every exec of a sandbox without no_env.
  // Names are environment names ([A-Za-z_][A-Za-z0-9_]*, not SBX_*); stored sealed.
  Status SetSecret(const std::string& name, const std::string& value);
  Result<std::vector<std::pair<std::string, int64_t>>> ListSecrets();  // name, updated_ms
  Status DeleteSecret(const std::string& name);
  // Loads the secrets into memory (at start).
  Status LoadSecrets();
  // A sandbox's scoped token (SBX_TOKEN): it names the sandbox and is signed with the key.
  std::string TokenFor(const std::string& id) const;
  // The sandbox a token is for, if it is genuine and that sandbox still exists.
  std::optional<std::string> SandboxOfToken(const std::string& token);
  // Records one serverless call on a disk (billed per call).
  Status RecordCall(const std::string& disk_id, const std::string& sandbox_id);
  // kUnavailable while the data dir's file system has less than min_free_mb free.
  Status CheckDataDirSpace() const;

  // Captures a sandbox's files (running: frozen only for the copy) as an immutable named
  // snapshot stacked on the layers it runs on.
  Result<storage::SnapshotRecord> Snapshot(const std::string& id, const std::string& name);
  // `count` new running sandboxes, each with a copy-on-write view of the source's files.
  Result<std::vector<SandboxView>> Fork(const std::string& id, int count);
  Result<std::vector<storage::SnapshotRecord>> ListSnapshots();
  Result<storage::SnapshotRecord> GetSnapshot(const std::string& name);
  // Sandboxes already started from it keep their layers until they are gone.
  Status DeleteSnapshot(const std::string& name);
  // Removes layer directories that no sandbox and no snapshot refers to.
  void CollectLayers();

  // A background process's agent request (env as for an exec; no timeout, no output cap,
  // stdin open, the pid reported) with the lease it holds while it runs.
  Result<PreparedProcess> PrepareProcess(const std::string& id, const ExecRequest& req);
  // The agent of a running sandbox (409 when it is not running, 503 when its init died).
  Result<std::shared_ptr<AgentLease>> LeaseAgent(const std::string& id);
  boost::asio::awaitable<Result<ExecResult>> Exec(boost::asio::any_io_executor ex,
                                                  const std::string& id, ExecRequest req,
                                                  agent::OutputFn on_output);

  // Applies TTLs (stop or pause) and idle policies, and marks sandboxes whose init died.
  // Called about once a second.
  void Tick();
  // Waits until every queued teardown has finished (tests, shutdown).
  void DrainTeardowns();

  struct Counts {
    int running = 0, stopped = 0, error = 0, creating = 0, deleting = 0, paused = 0;
    std::map<std::pair<std::string, std::string>, int> by_state;  // (state, isolation)
    int64_t creates = 0, execs = 0, deletes = 0, snapshots = 0, forks = 0, pauses = 0, resumes = 0;
    int pooled = 0;               // ready in the warm pool
    int64_t pool_claims = 0;      // creates served from the pool
  };
  Counts GetCounts();
  const TypeTable& types() const { return types_; }
  struct Latencies {
    Histogram create, exec, snapshot, fork, pause, resume, disk_exec, hibernate, restore;
  };
  Latencies& latencies() { return lat_; }
  uint64_t output_cap() const { return opts_.output_cap; }
  // The sandbox whose process is the peer of the unix socket `fd`, as its runtime tells.
  std::optional<std::string> SandboxOfPeer(int fd) const;
  // The store's size, free space and committed quotas (enabled() false: no store).
  bool has_store() const { return budget_.enabled(); }
  StoreStats StoreUse();
  int64_t keepalive_ms() const { return opts_.keepalive_ms; }

 private:
  struct Entry {
    storage::SandboxRecord rec;
    runtime::Instance inst;
    int active_execs = 0;
    bool busy = false;  // a blocking transition (start/stop) is in progress
    bool restoring = false;  // that transition is a restore from hibernation (a delete cancels it)
    int captures = 0;   // snapshots or forks copying its files
    // Idle policy: last activity, and the last CPU sample.
    int64_t last_active_ms = 0;
    uint64_t cpu_ns = 0;
    int64_t cpu_sample_ms = 0;
  };
  // A capture of a sandbox's files as a new layer over its own: the whole chain.
  Result<std::vector<std::string>> Capture(const std::string& id, uint64_t* bytes);
  // use_pool: claim from (and teach) the warm pool; forks' one-off layers do not.
  Result<SandboxView> CreateOn(const CreateRequest& req, const std::string& image,
                               const std::vector<std::string>& layers, bool use_pool = true);
  storage::SandboxRecord MakeRecord(const CreateRequest& req, const SandboxType& type,
                                    const std::string& image, const std::vector<std::string>& layers);
  // The warm pool.
  struct PoolKey {
    std::string isolation;  // the runtime the warm sandboxes boot on
    std::string image, from;
    std::vector<std::string> layers;
    std::vector<std::pair<std::string, std::string>> disks;  // bound at boot
    int64_t last_used_ms = 0;
    int failures = 0;          // fills that failed in a row
    int64_t retry_after_ms = 0;  // back-off after a failure
  };
  std::shared_ptr<Entry> TakePooled(const std::string& key);  // mu_ held
  // Hands an entry that is in no map (pooled, or a failed claim) to the teardown.
  void DiscardLocked(const std::shared_ptr<Entry>& e);  // mu_ held
  Result<SandboxView> Claim(std::shared_ptr<Entry> e, const CreateRequest& req, const SandboxType& type);
  void PoolLoop();
  // False if the fill failed.
  bool FillOne(const std::string& key, const PoolKey& k);
  void DropPool(const std::string& key);  // mu_ held

  int64_t Now() const { return opts_.now_ms(); }
  SandboxView ViewLocked(const Entry& e) const;
  std::string DirOf(const std::string& id) const { return opts_.data_dir + "/sandboxes/" + id; }
  runtime::StartSpec SpecOf(const storage::SandboxRecord& r) const;
  // Adopts every running or frozen sandbox of `rows` in parallel (recovery.cc).
  std::map<std::string, Result<runtime::Instance>> AdoptAll(const std::vector<storage::SandboxRecord>& rows);
  Result<std::shared_ptr<Entry>> Find(const std::string& id);  // mu_ held
  // The environment of an exec or process: base, id and token, secrets (unless no_env),
  // the sandbox's env, then the request's.
  std::vector<std::string> ExecEnvLocked(const std::string& id, const Entry& e,
                                         const std::map<std::string, std::string>& extra);  // mu_ held
  Status CheckExecRequest(const ExecRequest& req) const;
  // OK if commands can run in it now.
  Status RunnableLocked(const std::string& id, const Entry& e);  // mu_ held
  void CloseBilling(storage::SandboxRecord& r);                // mu_ held
  // It became running now: a new billing period (per-second sandboxes).
  void OpenBilling(storage::SandboxRecord& r);                 // mu_ held
  // kResourceExhausted if `add` more live sandboxes of this size would pass a quota.
  Status CheckQuotaLocked(int add, int64_t memory_mb, int64_t disk_mb) const;  // mu_ held
  int64_t CommittedDiskMbLocked() const;
  // The layer paths of a record's or snapshot's layers_json, topmost first.
  static std::vector<std::string> LayerPaths(const std::string& layers_json);                                        // mu_ held
  // The disk_mb a new sandbox of `type` gets for `req`.
  int64_t DiskMbFor(const CreateRequest& req, const SandboxType& type) const;
  // mode "freeze" or "hibernate".
  Status PauseLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Entry>& e, const std::string& mode);
  // Where a hibernated sandbox's checkpoint is kept.
  std::string CheckpointDir(const std::string& id) const;
  Status ResumeLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Entry>& e);

  Status StopLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Entry>& e,
                    const std::string& reason);
  void EnqueueTeardown(const std::string& id);
  void TeardownLoop();

  ManagerOptions opts_;
  storage::Store* store_;
  layers::ImageStore* images_;
  disks::DiskStore* disks_ = nullptr;
  const runtime::Registry* runtimes_;
  // The runtime of a sandbox (by its isolation kind).
  runtime::Runtime& Rt(const storage::SandboxRecord& r) const {
    runtime::Runtime* rt = runtimes_->Find(r.isolation);
    return rt ? *rt : *runtimes_->layers();
  }
  TypeTable types_;

  std::mutex mu_;
  StoreBudget budget_;
  std::map<std::string, std::shared_ptr<Entry>> sandboxes_;  // not deleting
  std::map<std::string, std::shared_ptr<Entry>> deleting_;   // queued for teardown
  int64_t creates_ = 0, execs_ = 0, deletes_ = 0, snapshots_ = 0, forks_ = 0, pauses_ = 0, resumes_ = 0;
  Latencies lat_;
  std::mutex secrets_mu_;
  std::map<std::string, std::string> secrets_;  // name -> value, in memory only
  std::mutex gc_mu_;  // one layer collection at a time
  // Fresh layers that no row names yet (a capture's caller records them): never collected.
  std::multiset<std::string> pending_layers_;
  uint64_t capture_starts_ = 0;  // captures ever started: the layer collector's guard
  std::map<std::string, PoolKey> wanted_;                                  // by layers_json
  std::map<std::string, std::deque<std::shared_ptr<Entry>>> pool_;        // by layers_json
  int64_t pool_claims_ = 0;
  std::condition_variable pool_cv_;
  // Notified (with mu_) when a sandbox's transition or capture ends, or a teardown finishes.
  std::condition_variable settled_cv_;
  std::thread pool_thread_;

  std::mutex tq_mu_;
  std::condition_variable tq_cv_;
  std::deque<std::string> teardown_queue_;
  int teardown_active_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> teardown_threads_;
};

}  // namespace sbx::core
