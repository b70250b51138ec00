// Typed access to sbxd's tables: sandboxes, images, settings. Any thread (Db serializes).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "storage/db.h"

namespace sbx::storage {

struct SandboxRecord {
  std::string id;
  std::string name;  // may be empty
  std::string state;  // creating, running, paused, stopped, error, deleting
  std::string type;
  std::string isolation;
  std::string image;
  std::string layers_json = "[]";  // the root layers it was created on
  int64_t cpus = 0;
  int64_t memory_mb = 0;
  int64_t disk_mb = 0;
  int64_t pids = 0;
  int64_t ttl_seconds = 0;
  std::string ttl_action = "stop";
  int64_t idle_timeout_seconds = 0;
  bool no_env = false;
  std::string env_json = "{}";
  std::string metadata_json = "{}";
  std::string network_json = "{}";
  int64_t created_ms = 0;
  int64_t started_ms = 0;  // when it last became running (0 if not running)
  int64_t expires_ms = 0;
  int64_t billed_ms = 0;   // closed billing periods
  // What the sandbox's runtime needs to find it again after a restart (opaque here; empty
  // when nothing runs).
  std::string runtime_state;
  std::string error;
  std::string from_snapshot;  // the snapshot it started from, if any
  std::string disks_json = "[]";  // [{"id", "mount_path"}]
  std::string pause_mode;  // paused: "freeze" or "hibernate"
  int64_t paused_ms = 0;   // when it was paused (0 if not paused)
  bool auto_resume = true;  // an exec on it while paused resumes it first
  bool public_ports = false;  // the port proxy reaches it without credentials
  bool no_new_privs = true;   // nothing in it gains privileges by exec (setuid programs)
  // Who its commands and file operations run as when a call names no one: "root", or a
  // user of its image ("user" where the image has one). Empty (rows from before the
  // column) is root.
  std::string user;
  std::string billing = "time";  // "time": per second; "call": a serverless call's sandbox
  // The generation of its SBX_TOKEN: raised by each capture of its memory, which kills
  // the tokens that the saved memory holds (a copy's processes must not reach it).
  int64_t token_gen = 0;
};

// A billing period: a sandbox running from start_ms to end_ms (0: still running), with
// the network bytes it had sent and received in all when the period opened, and those
// it sent and received within the period (set when it closes).
struct UsagePeriod {
  std::string sandbox_id;
  std::string name;
  std::string type;
  double usd_per_hour = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  uint64_t tx_open = 0, rx_open = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0;
};

// One serverless call on a disk, billed per call.
struct UsageCall {
  std::string disk_id;
  std::string sandbox_id;
  int64_t at_ms = 0;
  double usd = 0;
};

// A persistent disk: a filesystem of its own that outlives sandboxes.
struct DiskRecord {
  std::string id;
  std::string name;
  int64_t size_mb = 0;
  int64_t created_ms = 0;
};

struct ImageRecord {
  std::string name;
  std::string path;
  int64_t size_bytes = 0;
  int64_t created_ms = 0;
};

// A named snapshot: an immutable chain of read-only layers (topmost first) over an image.
struct SnapshotRecord {
  std::string name;
  std::string layers_json;  // every layer a sandbox from it mounts, topmost first
  std::string image;        // the image at the bottom of the chain
  std::string parent;       // the snapshot the source sandbox started from, if any
  std::string source;       // the sandbox it was taken from
  std::string user;         // its source's default user ("" = root: taken before users existed)
  int64_t size_bytes = 0;   // bytes of its own (topmost) layer
  int64_t created_ms = 0;
  // The isolation kind whose memory its topmost layer holds too ("": files only).
  std::string memory;
  // That memory is of a sandbox whose execs got the daemon's secrets (it had no `no_env`
  // and secrets were set): its processes may hold them.
  bool memory_secrets = false;
};

// A daemon secret, sealed (AES-256-GCM) with the data dir's secret key.
struct SecretRecord {
  std::string name;
  std::string sealed;
  int64_t updated_ms = 0;
};

class Store {
 public:
  // Opens the database and applies migrations.
  static Result<std::unique_ptr<Store>> Open(const std::string& path);

  Status InsertSandbox(const SandboxRecord& r);
  Status UpdateSandbox(const SandboxRecord& r);
  Status DeleteSandbox(const std::string& id);
  Result<std::optional<SandboxRecord>> GetSandbox(const std::string& id);
  Result<std::vector<SandboxRecord>> ListSandboxes();

  Status PutImage(const ImageRecord& r);
  Result<std::optional<ImageRecord>> GetImage(const std::string& name);
  Result<std::vector<ImageRecord>> ListImages();
  // False when there was no such image.
  Result<bool> DeleteImage(const std::string& name);

  Status InsertSnapshot(const SnapshotRecord& r);
  Result<std::optional<SnapshotRecord>> GetSnapshot(const std::string& name);
  Result<std::vector<SnapshotRecord>> ListSnapshots();
  // True if a row was removed.
  Result<bool> DeleteSnapshot(const std::string& name);

  Status InsertDisk(const DiskRecord& r);
  // By id, or by name.
  Result<std::optional<DiskRecord>> GetDisk(const std::string& id_or_name);
  Result<std::vector<DiskRecord>> ListDisks();
  Status DeleteDisk(const std::string& id);

  // Usage: billing periods and serverless calls. Rows outlive their sandboxes.
  // Opens a period (closing any still open for that sandbox at p.start_ms).
  Status OpenPeriod(const UsagePeriod& p);
  // Closes a sandbox's open period; `tx_total`/`rx_total`: the bytes it has moved in all.
  Status ClosePeriod(const std::string& sandbox_id, int64_t end_ms, uint64_t tx_total = 0, uint64_t rx_total = 0);
  Status InsertCall(const UsageCall& c);
  // Periods overlapping [from, to) (open ones included), calls within it.
  Result<std::vector<UsagePeriod>> PeriodsBetween(int64_t from_ms, int64_t to_ms);
  Result<std::vector<UsageCall>> CallsBetween(int64_t from_ms, int64_t to_ms);

  Status PutSecret(const std::string& name, const std::string& sealed, int64_t updated_ms);
  Result<std::vector<SecretRecord>> ListSecrets();
  Result<bool> DeleteSecret(const std::string& name);

  Status SetSetting(const std::string& key, const std::string& value);
  Result<std::optional<std::string>> GetSetting(const std::string& key);

  Db& db() { return *db_; }

 private:
  explicit Store(std::unique_ptr<Db> db) : db_(std::move(db)) {}
  Status Migrate();
  std::unique_ptr<Db> db_;
};

}  // namespace sbx::storage
