// SandboxManager: core's front. It owns the sandbox table and the services beside it, and
// each public call is one operation of the product (create, exec, pause, snapshot, ...).
// Every transition is persisted in SQLite before it is acted on. Thread-safe: blocking
// calls (Create, Start, Stop, Pause, Resume, Snapshot, Fork) run on the caller's thread
// (the API runs them on its blocking pool); Exec and the agent leases are coroutines.
//
// Where each part lives (one file per service; all of them work on the table under its
// lock, which clang checks):
//   sandbox_table.*  the map, its lock, lookups, State and RequireState
//   admission.*      quotas, the store's budget, the data dir's free space
//   metering.*       billing periods, per-call billing, usage
//   secrets.*        daemon secrets and sandbox tokens
//   work_queue.*     the teardown threads
//   create.cc        validation, records, cold creates       lifecycle.cc  stop, start, pause, resume
//   warm_pool.cc     the warm pool (claims and refills)       teardown.cc   delete and teardown
//   captures.cc      snapshots, forks, layer collection       exec.cc       exec, agent leases, auto-resume
//   policy.cc        TTL, idle, dead inits (Tick)             serverless.cc calls on a disk, disk deletion
//   recovery.cc      reconciling SQLite with the kernel at start
#pragma once

#include <utility>  // before asio: its headers use std::exchange

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/client.h"
#include "base/metrics.h"
#include "base/sync.h"
#include "core/admission.h"
#include "core/metering.h"
#include "core/options.h"
#include "core/requests.h"
#include "core/sandbox_table.h"
#include "core/secrets.h"
#include "core/types.h"
#include "core/views.h"
#include "core/work_queue.h"
#include "disks/disk_store.h"
#include "layers/images.h"
#include "net/rules.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "storage/store.h"

namespace sbx::net {
class Network;
}

namespace sbx::core {

class ProcessTable;

// The answer of a serverless call: the command's exit and the disk it ran on.
struct DiskCallResult {
  ExecResult exec;
  std::string sandbox_id, disk_id;
  double cost_usd = 0;
};

class SandboxManager {
 public:
  SandboxManager(ManagerOptions opts, storage::Store* store, layers::ImageStore* images,
                 const runtime::Registry* runtimes, TypeTable types = TypeTable::Defaults());
  ~SandboxManager();

  // Disks become available to sandboxes (optional: unit tests run without).
  void AttachDisks(disks::DiskStore* disks) { disks_ = disks; }
  // Reconciles SQLite with the kernel: re-adopts live sandboxes, finishes interrupted
  // deletes, marks the rest `error`, and removes orphaned cgroups and directories.
  Status Recover();  // recovery.cc

  // create.cc. Create blocks; CreateCall is a create from the API (sbx's and E2B's): run
  // on core's blocking pool, refused at once (kResourceExhausted with a retry hint) while
  // max_creates_in_flight are under way. Both record the create's latency.
  Result<SandboxView> Create(const CreateRequest& req);
  boost::asio::awaitable<Result<SandboxView>> CreateCall(CreateRequest req);
  Result<SandboxView> Get(const std::string& id);
  // What a running or paused (frozen) sandbox uses now (409 otherwise).
  Result<SandboxStats> Stats(const std::string& id);
  // The id of the sandbox that `ref` names (an id, a name, or a unique prefix of an id);
  // see SandboxTable::Resolve. With `active`, the call is activity for its idle policy
  // (any API call on a sandbox is, but a stats reading), in the same look at the table.
  Result<std::string> ResolveSandbox(const std::string& ref, bool active = false);
  // What `ref` names for a holder of sandbox `own`'s token: `own` if it is its id or its
  // name (and then, with `active`, activity), else `ref` as it is (never a prefix, which
  // would tell whether other ids share one).
  std::string ResolveOwnSandbox(const std::string& own, const std::string& ref, bool active);
  // Whether sandbox `id` exists (not pooled, not deleting); if so, the call is activity.
  bool MarkActive(const std::string& id);
  Result<std::vector<SandboxView>> List(const ListFilter& filter);
  Result<SandboxView> Update(const std::string& id, const UpdateRequest& req);

  // lifecycle.cc. Pause freezes (mode "freeze": memory kept) or checkpoints to disk (mode
  // "hibernate": memory freed; refused while sbxd holds a connection into the sandbox,
  // other than those of background processes that the agent keeps: they are detached
  // first and attached again after the resume); idempotent. Billing stops while paused,
  // and so does the TTL clock. Blocking: call them off the io threads.
  Result<SandboxView> Stop(const std::string& id);
  Result<SandboxView> Start(const std::string& id);
  Result<SandboxView> Pause(const std::string& id, const std::string& mode);
  Result<SandboxView> Resume(const std::string& id);

  // teardown.cc. Delete answers at once; the teardown runs on a background thread.
  // `only_if_expired`: only a running sandbox whose TTL deletes it and has passed (checked
  // under the lock that marks it, so that a TTL moved on meanwhile keeps it);
  // kFailedPrecondition otherwise.
  Status Delete(const std::string& id, bool only_if_expired = false);
  void DrainTeardowns();  // waits until every queued teardown has finished

  // captures.cc. A snapshot captures a sandbox's files (running: frozen only for the
  // copy) as an immutable named snapshot stacked on the layers it runs on; a fork makes
  // `count` running sandboxes, each with a copy-on-write view of the source's files.
  // With `memory`, the snapshot holds the running sandbox's memory too, where its wall can
  // (a sandbox from it starts from that memory), and each fork starts from the source's
  // memory; 409 with the reason where it cannot.
  Result<storage::SnapshotRecord> Snapshot(const std::string& id, const std::string& name, bool memory = false);
  Result<std::vector<SandboxView>> Fork(const std::string& id, int count, bool memory = false);
  Result<std::vector<storage::SnapshotRecord>> ListSnapshots();
  Result<storage::SnapshotRecord> GetSnapshot(const std::string& name);
  // Sandboxes already started from it keep their layers until they are gone.
  Status DeleteSnapshot(const std::string& name);
  // Deletes an image that no sandbox (in any state) and no snapshot starts from (409
  // naming them otherwise); its warm-pool spares go, and its folder once nothing uses it.
  Status DeleteImage(const std::string& name);
  // Removes layer directories that no sandbox and no snapshot refers to.
  void CollectLayers();

  // exec.cc. A paused sandbox with auto_resume on is resumed first (core's policy).
  boost::asio::awaitable<Result<ExecResult>> Exec(boost::asio::any_io_executor ex, const std::string& id,
                                                  ExecRequest req, agent::OutputFn on_output);
  // The agent of a running sandbox for one file, port or process operation (409 when it
  // is not running, 503 when its init died).
  boost::asio::awaitable<Result<std::shared_ptr<AgentLease>>> AcquireAgent(const std::string& id);
  // A background process's agent request (env as for an exec; no timeout, no output cap,
  // stdin open, the pid reported) with the lease it holds while it runs.
  boost::asio::awaitable<Result<PreparedProcess>> PrepareProcess(const std::string& id, ExecRequest req);
  // True if the sandbox was made `public`: its ports need no credentials.
  bool PortsArePublic(const std::string& id);
  // A signed grant for `port` of sandbox `id`, valid `ttl_seconds` (1 s to 7 days): the
  // grant and its expiry (Unix seconds). 404 for no such sandbox, 400 for a bad ttl.
  Result<std::pair<std::string, int64_t>> GrantPort(const std::string& id, int port, int64_t ttl_seconds);
  // True if `grant` is genuine for that sandbox and port, not expired, and the sandbox exists.
  bool PortGrantValid(const std::string& id, int port, const std::string& grant);
  // The agent of a running sandbox, without waking a paused one (a reattach).
  Result<std::shared_ptr<AgentLease>> LeaseAgent(const std::string& id);
  // The table of background processes, told around hibernates and resumes.
  void set_processes(ProcessTable* p) { processes_ = p; }
  // The host's networking for sandboxes (none: every sandbox has loopback only).
  void set_network(net::Network* n) { network_ = n; }

  // sandbox_network.cc. Replaces a sandbox's network rules (PATCH .../network); a running
  // sandbox gets or loses its link at once, new connections follow the new rules.
  Result<SandboxView> SetNetwork(const std::string& id, const nlohmann::json& network);
  // At sbxd's start, after recovery: every sandbox's rules into the firewall at once.
  Status InstallNetwork();

  // serverless.cc. One command in a fresh sandbox with the disk at /mnt/disk (a string
  // command runs with the image's bash, else sh); the sandbox goes when it ends.
  // `isolation`: the call's wall (empty: the default).
  boost::asio::awaitable<Result<DiskCallResult>> RunOnDisk(boost::asio::any_io_executor ex, const std::string& disk,
                                                           const std::string& image, const std::string& from,
                                                           const std::string& isolation,
                                                           nlohmann::json network, ExecRequest req,
                                                           const std::string& shell_cmd,
                                                           agent::OutputFn on_output);
  // Deletes a disk no sandbox uses (409 otherwise; waits briefly for teardowns).
  Status DeleteDisk(const std::string& id);

  // policy.cc: applies TTLs (stop or pause) and idle policies, and marks sandboxes whose
  // init died. Called about once a second.
  void Tick();

  // The sandbox a scoped token is for, if it is genuine and that sandbox still exists.
  std::optional<std::string> SandboxOfToken(const std::string& token);
  // The sandbox whose process is the peer of the unix socket `fd`, as its runtime tells.
  std::optional<std::string> SandboxOfPeer(int fd) const;

  Secrets& secrets() { return secrets_; }
  const Metering& metering() const { return metering_; }
  const Admission& admission() const { return admission_; }
  StoreStats StoreUse();
  // What this sbxd has, for GET /v1/health (later walls extend it).
  struct Features {
    bool hibernate = false;              // some isolation kind can hibernate
    std::vector<std::string> hibernate_isolation;  // the kinds that can
    std::vector<std::string> memory_isolation;     // the kinds whose captures may keep memory
    bool store = false;                  // sandboxes' files are on the btrfs store
    std::vector<std::string> isolation;  // the kinds a create may ask for
    std::string microvm_accel;           // kvm or tcg ("" while probing, or no microVM wall)
    std::string microvm_channel;         // vsock or serial ("": no microVM wall)
  };
  Features GetFeatures() const;
  const TypeTable& types() const { return types_; }
  uint64_t output_cap() const { return opts_.output_cap; }
  int64_t keepalive_ms() const { return opts_.keepalive_ms; }
  int64_t max_ttl_seconds() const { return opts_.max_ttl_seconds; }
  int64_t now_ms() const { return opts_.now_ms(); }  // the manager's clock (tests drive it)

  struct Counts {
    int running = 0, stopped = 0, error = 0, creating = 0, deleting = 0, paused = 0;
    // (state, isolation): every wall of this sbxd with every state shown (zeros included,
    // so that a series never vanishes), the sandboxes being torn down under "deleting".
    std::map<std::pair<std::string, std::string>, int> by_state;
    int64_t creates = 0, execs = 0, deletes = 0, snapshots = 0, forks = 0, pauses = 0, resumes = 0;
    int pooled = 0;           // ready in the warm pool
    int64_t pool_claims = 0;  // creates served from the pool
    // Bytes through the links of the sandboxes there are now (sent, received), and what
    // the resolver answered since sbxd started.
    uint64_t net_tx_bytes = 0, net_rx_bytes = 0;
    uint64_t dns_queries = 0, dns_refused = 0, dns_rebinding = 0, dns_rate_limited = 0;
  };
  Counts GetCounts();
  struct Latencies {
    Histogram create, exec, snapshot, fork, pause, resume, disk_exec, hibernate, restore;
  };
  Latencies& latencies() { return lat_; }

 private:
  using Lock = MutexLock;

  // create.cc
  Result<SandboxView> CreateNow(const CreateRequest& req);  // Create, unmeasured
  Status ValidateCreate(const CreateRequest& req) const;
  // use_pool: claim from (and teach) the warm pool; forks' one-off layers do not.
  Result<SandboxView> CreateOn(const CreateRequest& req, const std::string& image,
                               const std::vector<std::string>& layers, bool use_pool = true);
  storage::SandboxRecord MakeRecord(const CreateRequest& req, const SandboxType& type, const std::string& image,
                                    const std::vector<std::string>& layers);
  runtime::StartSpec SpecOf(const storage::SandboxRecord& r) const;
  // sandbox_network.cc
  Result<net::Rules> ValidateNetwork(const nlohmann::json& network) const;
  std::optional<runtime::NetLink> LinkOfRow(const storage::SandboxRecord& r) const;
  std::string Nameserver() const;
  int MbpsOf(const storage::SandboxRecord& r) const;  // its type's network_mbps
  // The link a hibernated sandbox's checkpoint holds (its rules may have changed since),
  // kept in its row by MarkHibernatedLink at the hibernate (nullopt: cleared).
  std::optional<runtime::NetLink> HibernatedLink(const storage::SandboxRecord& r) const;
  static void MarkHibernatedLink(storage::SandboxRecord* r, const std::optional<runtime::NetLink>& link);
  // Rules into the firewall (and a slot, for a sandbox that reaches out) before its link
  // exists; ReleaseNetwork undoes it when the sandbox goes.
  Status PrepareNetwork(storage::SandboxRecord* r);
  void ReleaseNetwork(const storage::SandboxRecord& r);
  // A row torn down at sbxd's start, before its rules are in the firewall: only its
  // connections to forget (its slot is not held; InstallNetwork leaves its rules out).
  void ForgetRowConnections(const storage::SandboxRecord& r);
  // A claimed pooled sandbox's network: the pooled one's when the request asks for the
  // same rules (nothing changes), else the request's (its link made or taken away).
  Status ClaimNetwork(const storage::SandboxRecord& pooled, const runtime::Instance& inst,
                      storage::SandboxRecord* claimed);
  // Adds the bytes of the sandbox's link to its row before the link goes.
  void KeepLinkBytes(storage::SandboxRecord* r);
  std::pair<uint64_t, uint64_t> NetworkBytes(const Entry& e) const;  // sent, received
  // The same from a record alone: `linked` says its link (if its rules give it one) is up.
  std::pair<uint64_t, uint64_t> RowNetworkBytes(const storage::SandboxRecord& r, bool linked) const;
  // A sandbox as the API shows it, with what the host says of it (its link's counters
  // from sysfs, a VM wall's accelerator). ViewLocked is the part read from the entry;
  // AddHostFacts the rest, from the view's own copy of the record, without the lock
  // (Get, List and GetCounts do so; a transition's answer still reads them with it).
  SandboxView View(const Entry& e) const;
  SandboxView ViewLocked(const Entry& e) const;
  void AddHostFacts(SandboxView* v) const;
  std::string DirOf(const std::string& id) const { return opts_.data_dir + "/sandboxes/" + id; }
  // Where a hibernated sandbox's checkpoint is kept.
  std::string CheckpointDir(const std::string& id) const { return opts_.data_dir + "/hibernated/" + id; }
  int64_t Now() const { return opts_.now_ms(); }
  // The runtime of a sandbox (by its isolation kind).
  // A kind this sbxd lacks gets a wall that refuses everything (runtime/missing_wall.h).
  runtime::Runtime& Rt(const storage::SandboxRecord& r) const { return runtimes_->Of(r.isolation); }

  // lifecycle.cc: each drops the table's lock around the runtime's work.
  Status StopLocked(const EntryPtr& e, const std::string& reason) SBX_REQUIRES(table_.mu);
  Status PauseLocked(const EntryPtr& e, const std::string& mode) SBX_REQUIRES(table_.mu);
  Status ResumeLocked(const EntryPtr& e) SBX_REQUIRES(table_.mu);

  // warm_pool.cc
  struct PoolKey {
    std::string isolation;  // the runtime the warm sandboxes boot on
    std::string image, from;
    std::vector<std::string> layers;
    std::vector<std::pair<std::string, std::string>> disks;  // bound at boot
    int64_t last_used_ms = 0;
    int failures = 0;            // fills that failed in a row
    int64_t retry_after_ms = 0;  // back-off after a failure
  };
  // A warm sandbox for `req` (nullptr: none), teaching the pool to keep this key warm.
  EntryPtr TakeFromPool(const CreateRequest& req, const std::string& image, const std::vector<std::string>& layers);
  // Whether a warm sandbox (of the "small" type) can serve this create: always, but on a
  // wall of fixed shape (a VM's) only a create of the same vCPUs and memory.
  bool PoolFits(const CreateRequest& req, const SandboxType& type) const;
  EntryPtr TakePooled(const std::string& key) SBX_REQUIRES(table_.mu);
  Result<SandboxView> Claim(EntryPtr e, const CreateRequest& req, const SandboxType& type);
  // After a start that loaded a saved memory (a memory template's copy, a fork with
  // memory): the kept processes that came with it are followed as the sandbox's own
  // before its create answers. Drops the table's lock around the agent's round trip.
  void FollowLoadedProcesses(const runtime::Instance& inst, const std::string& id) SBX_REQUIRES(table_.mu);
  void PoolLoop();
  bool FillOne(const std::string& key, const PoolKey& k);  // false if the fill failed
  void DropPool(const std::string& key) SBX_REQUIRES(table_.mu);
  // Drops the pool keys that `match` selects (their warm sandboxes go).
  void DropPoolIf(const std::function<bool(const PoolKey&)>& match);

  // teardown.cc: hands an entry (in the table, pooled, or a failed claim) to the teardown.
  void DiscardLocked(const EntryPtr& e) SBX_REQUIRES(table_.mu);
  void TeardownOne(const std::string& id);

  // captures.cc: a capture of a sandbox's files as a new layer over its own (the chain).
  Result<std::vector<std::string>> Capture(const std::string& id, uint64_t* bytes, bool memory = false);
  void Unpin(const std::string& layer);

  // lifecycle.cc: Pause without the detaching around it.
  Result<SandboxView> PauseOrHibernate(const std::string& id, const std::string& mode);

  // exec.cc
  Status CheckExecRequest(const ExecRequest& req) const;
  // Resumes a sandbox that CallableLocked asked to wake (paused, auto_resume on).
  boost::asio::awaitable<Status> Wake(const std::string& id);
  // OK if commands can run in it now.
  Status RunnableLocked(const Entry& e) SBX_REQUIRES(table_.mu);
  // The one look at the table of a call that needs a running sandbox: its entry if
  // commands can run in it now; with `may_wake`, one paused with auto_resume on sets
  // `*wake` instead (the caller wakes it, then looks once more without `may_wake`).
  Result<EntryPtr> CallableLocked(const std::string& id, bool may_wake, bool* wake) SBX_REQUIRES(table_.mu);
  // A lease on `e`'s agent: one more connection open, and activity, until it ends.
  std::shared_ptr<AgentLease> LeaseLocked(const EntryPtr& e) SBX_REQUIRES(table_.mu);
  // Writes the sandbox's /run/sbx.env (agent/self_env.h: its id and live token) into it
  // now, if it runs: after a capture of its memory killed its token, and where its
  // processes came with a saved memory. Blocking, without the table's lock; a failure is
  // logged (the sandbox's next command writes it).
  void RenewSelfEnv(const std::string& id) SBX_EXCLUDES(table_.mu);
  // The environment of an exec or process: base, id and token, secrets (unless no_env),
  // the sandbox's env, then the request's.
  // `as_root` false: without the base HOME (the agent sets the user's own). `self_env`,
  // if given, gets the content of the sandbox's /run/sbx.env (the same id and token).
  std::vector<std::string> ExecEnv(const Entry& e, const std::map<std::string, std::string>& extra,
                                   bool as_root, std::string* self_env = nullptr) const;

  // serverless.cc: the shell that string commands of serverless calls run with: bash
  // where the sandbox's root has it, else /bin/sh.
  std::string ShellFor(const storage::SandboxRecord& r) const;

  // recovery.cc: adopts every running or frozen sandbox of `rows` in parallel.
  std::map<std::string, Result<runtime::Instance>> AdoptAll(const std::vector<storage::SandboxRecord>& rows);

  ManagerOptions opts_;
  storage::Store* store_;
  layers::ImageStore* images_;
  disks::DiskStore* disks_ = nullptr;
  ProcessTable* processes_ = nullptr;  // set once, before serving
  net::Network* network_ = nullptr;    // set once, before serving
  const runtime::Registry* runtimes_;
  TypeTable types_;

  SandboxTable table_;
  Admission admission_;
  Metering metering_;
  Secrets secrets_;
  std::atomic<bool> ticking_{false};  // a Tick runs
  std::atomic<int> creates_in_flight_{0};  // CreateCall's
  int64_t creates_ SBX_GUARDED_BY(table_.mu) = 0;
  int64_t execs_ SBX_GUARDED_BY(table_.mu) = 0;
  int64_t deletes_ SBX_GUARDED_BY(table_.mu) = 0;
  int64_t snapshots_ SBX_GUARDED_BY(table_.mu) = 0;
  int64_t forks_ SBX_GUARDED_BY(table_.mu) = 0;
  int64_t pauses_ SBX_GUARDED_BY(table_.mu) = 0;
  int64_t resumes_ SBX_GUARDED_BY(table_.mu) = 0;
  Latencies lat_;

  // Layer collection: one at a time; fresh layers that no row names yet (a capture's
  // caller records them) are never collected.
  Mutex gc_mu_;
  std::multiset<std::string> pending_layers_ SBX_GUARDED_BY(table_.mu);
  uint64_t capture_starts_ SBX_GUARDED_BY(table_.mu) = 0;  // the layer collector's guard

  // The warm pool, by key (the isolation kind and the layers, and the disks).
  std::map<std::string, PoolKey> wanted_ SBX_GUARDED_BY(table_.mu);
  std::map<std::string, std::deque<EntryPtr>> pool_ SBX_GUARDED_BY(table_.mu);
  int64_t pool_claims_ SBX_GUARDED_BY(table_.mu) = 0;
  bool pool_stopping_ SBX_GUARDED_BY(table_.mu) = false;
  CondVar pool_cv_;
  std::thread pool_thread_;

  // Blocking work that core's coroutines wait for (an auto-resume, a serverless call's
  // create), and the teardown threads (last: they are joined first).
  boost::asio::thread_pool blocking_{8};
  std::unique_ptr<WorkQueue> teardowns_;
};

}  // namespace sbx::core
