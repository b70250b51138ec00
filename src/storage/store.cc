#include "storage/store.h"

namespace sbx::storage {
namespace {

// Each entry moves the schema one version up; never edit a released entry.
const char* kMigrations[] = {
    R"sql(
CREATE TABLE sandboxes (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  type TEXT NOT NULL,
  isolation TEXT NOT NULL,
  image TEXT NOT NULL,
  layers_json TEXT NOT NULL,
  cpus INTEGER NOT NULL, memory_mb INTEGER NOT NULL, disk_mb INTEGER NOT NULL, pids INTEGER NOT NULL,
  ttl_seconds INTEGER NOT NULL, ttl_action TEXT NOT NULL, idle_timeout_seconds INTEGER NOT NULL,
  no_env INTEGER NOT NULL, env_json TEXT NOT NULL, metadata_json TEXT NOT NULL, network_json TEXT NOT NULL,
  created_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
  billed_ms INTEGER NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL,
  error TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX sandboxes_name ON sandboxes(name) WHERE name != '' AND state != 'deleting';
CREATE TABLE images (name TEXT PRIMARY KEY, path TEXT NOT NULL, size_bytes INTEGER NOT NULL,
                     created_ms INTEGER NOT NULL);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
)sql",
    R"sql(
CREATE TABLE snapshots (
  name TEXT PRIMARY KEY,
  layers_json TEXT NOT NULL,
  image TEXT NOT NULL,
  parent TEXT NOT NULL DEFAULT '',
  source TEXT NOT NULL DEFAULT '',
  size_bytes INTEGER NOT NULL,
  created_ms INTEGER NOT NULL
);
ALTER TABLE sandboxes ADD COLUMN from_snapshot TEXT NOT NULL DEFAULT '';
)sql",
    R"sql(
CREATE TABLE disks (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL DEFAULT '',
  size_mb INTEGER NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX disks_name ON disks(name) WHERE name != '';
ALTER TABLE sandboxes ADD COLUMN disks_json TEXT NOT NULL DEFAULT '[]';
)sql",
    R"sql(
ALTER TABLE sandboxes ADD COLUMN pause_mode TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN paused_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sandboxes ADD COLUMN billing TEXT NOT NULL DEFAULT 'time';
CREATE TABLE usage_periods (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  sandbox_id TEXT NOT NULL,
  name TEXT NOT NULL DEFAULT '',
  type TEXT NOT NULL,
  usd_per_hour REAL NOT NULL,
  start_ms INTEGER NOT NULL,
  end_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX usage_periods_open ON usage_periods(sandbox_id) WHERE end_ms = 0;
CREATE INDEX usage_periods_time ON usage_periods(start_ms);
CREATE TABLE usage_calls (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  disk_id TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  at_ms INTEGER NOT NULL,
  usd REAL NOT NULL
);
CREATE INDEX usage_calls_time ON usage_calls(at_ms);
)sql",
    R"sql(
CREATE TABLE secrets (name TEXT PRIMARY KEY, sealed TEXT NOT NULL, updated_ms INTEGER NOT NULL);
)sql",
    R"sql(
ALTER TABLE sandboxes ADD COLUMN public_ports INTEGER NOT NULL DEFAULT 0;
)sql",
    // The runtime's saved state replaces the container's pid and start time (which become
    // that runtime's saved state); the old columns stay, written as 0.
    R"sql(
ALTER TABLE sandboxes ADD COLUMN runtime_state TEXT NOT NULL DEFAULT '';
UPDATE sandboxes SET runtime_state = json_object('pid', pid, 'pid_start', pid_start) WHERE pid > 0;
UPDATE sandboxes SET pid = 0, pid_start = 0;
)sql",
    R"sql(
ALTER TABLE sandboxes ADD COLUMN no_new_privs INTEGER NOT NULL DEFAULT 1;
)sql",
    R"sql(
ALTER TABLE sandboxes ADD COLUMN default_user TEXT NOT NULL DEFAULT '';
)sql",
    R"sql(
ALTER TABLE snapshots ADD COLUMN default_user TEXT NOT NULL DEFAULT '';
)sql",
    R"sql(
ALTER TABLE usage_periods ADD COLUMN tx_open INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_periods ADD COLUMN rx_open INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_periods ADD COLUMN tx_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_periods ADD COLUMN rx_bytes INTEGER NOT NULL DEFAULT 0;
)sql",
    R"sql(
ALTER TABLE snapshots ADD COLUMN memory TEXT NOT NULL DEFAULT '';
)sql",
    R"sql(
ALTER TABLE snapshots ADD COLUMN memory_secrets INTEGER NOT NULL DEFAULT 0;
)sql",
    R"sql(
ALTER TABLE sandboxes ADD COLUMN token_gen INTEGER NOT NULL DEFAULT 0;
)sql",
};

const char* kSandboxCols =
    "id, name, state, type, isolation, image, layers_json, cpus, memory_mb, disk_mb, pids, ttl_seconds, "
    "ttl_action, idle_timeout_seconds, no_env, env_json, metadata_json, network_json, "
    "created_ms, started_ms, expires_ms, billed_ms, pid, pid_start, error, from_snapshot, disks_json, "
    "pause_mode, paused_ms, auto_resume, billing, public_ports, runtime_state, no_new_privs, default_user, token_gen";

std::vector<Value> SandboxValues(const SandboxRecord& r) {
  return {r.id,         r.name,        r.state,          r.type,
          r.isolation,  r.image,       r.layers_json, r.cpus,           r.memory_mb,
          r.disk_mb,    r.pids,        r.ttl_seconds,    r.ttl_action,
          r.idle_timeout_seconds, int64_t{r.no_env}, r.env_json, r.metadata_json,
          r.network_json, r.created_ms, r.started_ms,    r.expires_ms,
          r.billed_ms,  int64_t{0},    int64_t{0},       r.error, r.from_snapshot, r.disks_json,
          r.pause_mode, r.paused_ms, int64_t{r.auto_resume}, r.billing, int64_t{r.public_ports},
          r.runtime_state, int64_t{r.no_new_privs}, r.user, r.token_gen};
}

SandboxRecord SandboxFromRow(const Row& w) {
  SandboxRecord r;
  int i = 0;
  r.id = w.Text(i++);
  r.name = w.Text(i++);
  r.state = w.Text(i++);
  r.type = w.Text(i++);
  r.isolation = w.Text(i++);
  r.image = w.Text(i++);
  r.layers_json = w.Text(i++);
  r.cpus = w.Int(i++);
  r.memory_mb = w.Int(i++);
  r.disk_mb = w.Int(i++);
  r.pids = w.Int(i++);
  r.ttl_seconds = w.Int(i++);
  r.ttl_action = w.Text(i++);
  r.idle_timeout_seconds = w.Int(i++);
  r.no_env = w.Int(i++) != 0;
  r.env_json = w.Text(i++);
  r.metadata_json = w.Text(i++);
  r.network_json = w.Text(i++);
  r.created_ms = w.Int(i++);
  r.started_ms = w.Int(i++);
  r.expires_ms = w.Int(i++);
  r.billed_ms = w.Int(i++);
  i += 2;  // pid, pid_start: retired (see the last migration)
  r.error = w.Text(i++);
  r.from_snapshot = w.Text(i++);
  r.disks_json = w.Text(i++);
  r.pause_mode = w.Text(i++);
  r.paused_ms = w.Int(i++);
  r.auto_resume = w.Int(i++) != 0;
  r.billing = w.Text(i++);
  r.public_ports = w.Int(i++) != 0;
  r.runtime_state = w.Text(i++);
  r.no_new_privs = w.Int(i++) != 0;
  r.user = w.Text(i++);
  r.token_gen = w.Int(i++);
  return r;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  SBX_ASSIGN_OR_RETURN(auto db, Db::Open(path));
  std::unique_ptr<Store> s(new Store(std::move(db)));
  SBX_RETURN_IF_ERROR(s->Migrate());
  return s;
}

Status Store::Migrate() {
  SBX_RETURN_IF_ERROR(db_->Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
  return db_->Transaction([&]() -> Status {
    int64_t version = -1;
    SBX_RETURN_IF_ERROR(db_->Query("SELECT version FROM schema_version", {},
                                   [&](const Row& r) { version = r.Int(0); }));
    if (version < 0) {
      SBX_RETURN_IF_ERROR(db_->Query("INSERT INTO schema_version VALUES (0)", {}));
      version = 0;
    }
    const int64_t n = sizeof kMigrations / sizeof kMigrations[0];
    if (version > n)
      return MakeError(Code::kFailedPrecondition,
                       "database schema is newer than this sbxd (" + std::to_string(version) + ")");
    for (int64_t v = version; v < n; ++v) SBX_RETURN_IF_ERROR(db_->Exec(kMigrations[v]));
    return db_->Query("UPDATE schema_version SET version = ?", {n});
  });
}

Status Store::InsertSandbox(const SandboxRecord& r) {
  return db_->Query(std::string("INSERT INTO sandboxes (") + kSandboxCols +
                        ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    SandboxValues(r));
}

Status Store::UpdateSandbox(const SandboxRecord& r) {
  std::vector<Value> v = SandboxValues(r);
  v.emplace_back(r.id);
  return db_->Query(
      "UPDATE sandboxes SET id=?, name=?, state=?, type=?, isolation=?, image=?, layers_json=?, cpus=?, "
      "memory_mb=?, disk_mb=?, pids=?, ttl_seconds=?, ttl_action=?, idle_timeout_seconds=?, "
      "no_env=?, env_json=?, metadata_json=?, network_json=?, created_ms=?, started_ms=?, "
      "expires_ms=?, billed_ms=?, pid=?, pid_start=?, error=?, from_snapshot=?, disks_json=?, pause_mode=?, paused_ms=?, "
      "auto_resume=?, billing=?, public_ports=?, runtime_state=?, no_new_privs=?, default_user=?, token_gen=? WHERE id=?",
      v);
}

Status Store::DeleteSandbox(const std::string& id) {
  return db_->Query("DELETE FROM sandboxes WHERE id=?", {id});
}

Result<std::optional<SandboxRecord>> Store::GetSandbox(const std::string& id) {
  std::optional<SandboxRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query(std::string("SELECT ") + kSandboxCols + " FROM sandboxes WHERE id=?",
                                 {id}, [&](const Row& r) { out = SandboxFromRow(r); }));
  return out;
}

Result<std::vector<SandboxRecord>> Store::ListSandboxes() {
  std::vector<SandboxRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query(std::string("SELECT ") + kSandboxCols +
                                     " FROM sandboxes ORDER BY created_ms, id",
                                 {}, [&](const Row& r) { out.push_back(SandboxFromRow(r)); }));
  return out;
}

Status Store::PutImage(const ImageRecord& r) {
  return db_->Query("INSERT OR REPLACE INTO images (name, path, size_bytes, created_ms) VALUES (?,?,?,?)",
                    {r.name, r.path, r.size_bytes, r.created_ms});
}

Result<std::optional<ImageRecord>> Store::GetImage(const std::string& name) {
  std::optional<ImageRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query("SELECT name, path, size_bytes, created_ms FROM images WHERE name=?",
                                 {name}, [&](const Row& r) {
                                   out = ImageRecord{r.Text(0), r.Text(1), r.Int(2), r.Int(3)};
                                 }));
  return out;
}

Result<std::vector<ImageRecord>> Store::ListImages() {
  std::vector<ImageRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query("SELECT name, path, size_bytes, created_ms FROM images ORDER BY name",
                                 {}, [&](const Row& r) {
                                   out.push_back(ImageRecord{r.Text(0), r.Text(1), r.Int(2), r.Int(3)});
                                 }));
  return out;
}

Status Store::InsertSnapshot(const SnapshotRecord& r) {
  return db_->Query(
      "INSERT INTO snapshots (name, layers_json, image, parent, source, size_bytes, created_ms, default_user, memory, "
      "memory_secrets) VALUES (?,?,?,?,?,?,?,?,?,?)",
      {r.name, r.layers_json, r.image, r.parent, r.source, r.size_bytes, r.created_ms, r.user, r.memory,
       int64_t{r.memory_secrets ? 1 : 0}});
}

namespace {
const char* kSnapshotCols =
    "name, layers_json, image, parent, source, size_bytes, created_ms, default_user, memory, memory_secrets";
SnapshotRecord SnapshotFromRow(const Row& w) {
  return SnapshotRecord{w.Text(0), w.Text(1), w.Text(2), w.Text(3), w.Text(4),
                        w.Text(7), w.Int(5), w.Int(6), w.Text(8), w.Int(9) != 0};
}
}  // namespace

Result<std::optional<SnapshotRecord>> Store::GetSnapshot(const std::string& name) {
  std::optional<SnapshotRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query(std::string("SELECT ") + kSnapshotCols + " FROM snapshots WHERE name=?",
                                 {name}, [&](const Row& r) { out = SnapshotFromRow(r); }));
  return out;
}

Result<std::vector<SnapshotRecord>> Store::ListSnapshots() {
  std::vector<SnapshotRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query(std::string("SELECT ") + kSnapshotCols + " FROM snapshots ORDER BY created_ms, name",
                                 {}, [&](const Row& r) { out.push_back(SnapshotFromRow(r)); }));
  return out;
}

Result<bool> Store::DeleteImage(const std::string& name) {
  SBX_RETURN_IF_ERROR(db_->Query("DELETE FROM images WHERE name=?", {name}));
  return db_->Changes() > 0;
}

Result<bool> Store::DeleteSnapshot(const std::string& name) {
  SBX_RETURN_IF_ERROR(db_->Query("DELETE FROM snapshots WHERE name=?", {name}));
  return db_->Changes() > 0;
}

Status Store::InsertDisk(const DiskRecord& r) {
  return db_->Query("INSERT INTO disks (id, name, size_mb, created_ms) VALUES (?,?,?,?)",
                    {r.id, r.name, r.size_mb, r.created_ms});
}

Result<std::optional<DiskRecord>> Store::GetDisk(const std::string& id) {
  std::optional<DiskRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query("SELECT id, name, size_mb, created_ms FROM disks WHERE id=? OR (name=? AND name != '')",
                                 {id, id}, [&](const Row& r) {
                                   out = DiskRecord{r.Text(0), r.Text(1), r.Int(2), r.Int(3)};
                                 }));
  return out;
}

Result<std::vector<DiskRecord>> Store::ListDisks() {
  std::vector<DiskRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query("SELECT id, name, size_mb, created_ms FROM disks ORDER BY created_ms, id", {},
                                 [&](const Row& r) {
                                   out.push_back(DiskRecord{r.Text(0), r.Text(1), r.Int(2), r.Int(3)});
                                 }));
  return out;
}

Status Store::DeleteDisk(const std::string& id) { return db_->Query("DELETE FROM disks WHERE id=?", {id}); }

Status Store::OpenPeriod(const UsagePeriod& p) {
  return db_->Transaction([&]() -> Status {
    // At most one open period per sandbox.
    SBX_RETURN_IF_ERROR(ClosePeriod(p.sandbox_id, p.start_ms, p.tx_open, p.rx_open));
    return db_->Query(
        "INSERT INTO usage_periods (sandbox_id, name, type, usd_per_hour, start_ms, end_ms, tx_open, rx_open) "
        "VALUES (?,?,?,?,?,0,?,?)",
        {p.sandbox_id, p.name, p.type, p.usd_per_hour, p.start_ms, static_cast<int64_t>(p.tx_open),
         static_cast<int64_t>(p.rx_open)});
  });
}

Status Store::ClosePeriod(const std::string& sandbox_id, int64_t end_ms, uint64_t tx_total, uint64_t rx_total) {
  return db_->Query(
      "UPDATE usage_periods SET end_ms=MAX(start_ms, ?), tx_bytes=MAX(0, ? - tx_open), rx_bytes=MAX(0, ? - rx_open) "
      "WHERE sandbox_id=? AND end_ms=0",
      {end_ms, static_cast<int64_t>(tx_total), static_cast<int64_t>(rx_total), sandbox_id});
}

Status Store::InsertCall(const UsageCall& c) {
  return db_->Query("INSERT INTO usage_calls (disk_id, sandbox_id, at_ms, usd) VALUES (?,?,?,?)",
                    {c.disk_id, c.sandbox_id, c.at_ms, c.usd});
}

Result<std::vector<UsagePeriod>> Store::PeriodsBetween(int64_t from_ms, int64_t to_ms) {
  std::vector<UsagePeriod> out;
  SBX_RETURN_IF_ERROR(db_->Query(
      "SELECT sandbox_id, name, type, usd_per_hour, start_ms, end_ms, tx_open, rx_open, tx_bytes, rx_bytes "
      "FROM usage_periods WHERE start_ms < ? AND (end_ms = 0 OR end_ms > ?) ORDER BY seq",
      {to_ms, from_ms}, [&](const Row& r) {
        out.push_back(UsagePeriod{r.Text(0), r.Text(1), r.Text(2), r.Real(3), r.Int(4), r.Int(5),
                                  static_cast<uint64_t>(r.Int(6)), static_cast<uint64_t>(r.Int(7)),
                                  static_cast<uint64_t>(r.Int(8)), static_cast<uint64_t>(r.Int(9))});
      }));
  return out;
}

Result<std::vector<UsageCall>> Store::CallsBetween(int64_t from_ms, int64_t to_ms) {
  std::vector<UsageCall> out;
  SBX_RETURN_IF_ERROR(db_->Query(
      "SELECT disk_id, sandbox_id, at_ms, usd FROM usage_calls WHERE at_ms >= ? AND at_ms < ? ORDER BY seq",
      {from_ms, to_ms}, [&](const Row& r) { out.push_back(UsageCall{r.Text(0), r.Text(1), r.Int(2), r.Real(3)}); }));
  return out;
}

Status Store::PutSecret(const std::string& name, const std::string& sealed, int64_t updated_ms) {
  return db_->Query("INSERT OR REPLACE INTO secrets (name, sealed, updated_ms) VALUES (?,?,?)",
                    {name, sealed, updated_ms});
}

Result<std::vector<SecretRecord>> Store::ListSecrets() {
  std::vector<SecretRecord> out;
  SBX_RETURN_IF_ERROR(db_->Query("SELECT name, sealed, updated_ms FROM secrets ORDER BY name", {},
                                 [&](const Row& r) { out.push_back({r.Text(0), r.Text(1), r.Int(2)}); }));
  return out;
}

Result<bool> Store::DeleteSecret(const std::string& name) {
  SBX_RETURN_IF_ERROR(db_->Query("DELETE FROM secrets WHERE name=?", {name}));
  return db_->Changes() > 0;
}

Status Store::SetSetting(const std::string& key, const std::string& value) {
  return db_->Query("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", {key, value});
}

Result<std::optional<std::string>> Store::GetSetting(const std::string& key) {
  std::optional<std::string> out;
  SBX_RETURN_IF_ERROR(db_->Query("SELECT value FROM settings WHERE key=?", {key},
                                 [&](const Row& r) { out = r.Text(0); }));
  return out;
}

}  // namespace sbx::storage
