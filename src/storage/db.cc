#include "storage/db.h"

namespace sbx::storage {

Result<std::unique_ptr<Db>> Db::Open(const std::string& path) {
  std::unique_ptr<Db> db(new Db());
  int rc = sqlite3_open_v2(path.c_str(), &db->db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK)
    return MakeError(Code::kInternal, "open database " + path + ": " + sqlite3_errstr(rc));
  sqlite3_busy_timeout(db->db_, 5000);
  if (path != ":memory:") {
    SBX_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode=WAL"));
    SBX_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous=NORMAL"));
  }
  SBX_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON"));
  return db;
}

Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}

Status Db::Exec(const std::string& sql) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string m = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return MakeError(Code::kInternal, "sqlite: " + m);
  }
  return OkStatus();
}

Status Db::Query(const std::string& sql, const std::vector<Value>& params,
                 const std::function<void(const Row&)>& on_row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return QueryLocked(sql, params, on_row);
}

Status Db::QueryLocked(const std::string& sql, const std::vector<Value>& params,
                       const std::function<void(const Row&)>& on_row) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr);
  if (rc != SQLITE_OK) return MakeError(Code::kInternal, std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
  for (size_t i = 0; i < params.size(); ++i) {
    int idx = static_cast<int>(i + 1);
    const Value& v = params[i];
    if (std::holds_alternative<std::nullptr_t>(v)) sqlite3_bind_null(st, idx);
    else if (auto* n = std::get_if<int64_t>(&v)) sqlite3_bind_int64(st, idx, *n);
    else if (auto* d = std::get_if<double>(&v)) sqlite3_bind_double(st, idx, *d);
    else {
      const std::string& s = std::get<std::string>(v);
      sqlite3_bind_text(st, idx, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    }
  }
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (on_row) on_row(Row(st));
  std::string msg = rc == SQLITE_DONE ? "" : sqlite3_errmsg(db_);
  int ext = sqlite3_extended_errcode(db_);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    if (rc == SQLITE_CONSTRAINT || (ext & 0xff) == SQLITE_CONSTRAINT)
      return MakeError(Code::kAlreadyExists, "sqlite: " + msg);
    if (rc == SQLITE_FULL || (ext & 0xff) == SQLITE_FULL)
      return MakeError(Code::kUnavailable, "sbxd's data dir is full (sqlite: " + msg + "); free space and try again");
    return MakeError(Code::kInternal, "sqlite: " + msg);
  }
  return OkStatus();
}

Status Db::Transaction(const std::function<Status()>& fn) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  SBX_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status st = fn();
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

int64_t Db::Changes() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return sqlite3_changes64(db_);
}

}  // namespace sbx::storage
