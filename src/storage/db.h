// A thin SQLite wrapper: Db (one connection, serialized by a mutex), Stmt, Txn.
// Any thread; every call takes the connection's lock for its duration.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/result.h"

namespace sbx::storage {

using Value = std::variant<std::nullptr_t, int64_t, double, std::string>;

class Row {
 public:
  explicit Row(sqlite3_stmt* s) : s_(s) {}
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s_, col)) : "";
  }
  bool IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

 private:
  sqlite3_stmt* s_;
};

class Db {
 public:
  // Opens (creating) the database at `path`; ":memory:" for tests. WAL mode on files.
  static Result<std::unique_ptr<Db>> Open(const std::string& path);
  ~Db();

  Status Exec(const std::string& sql);
  // Runs one statement with bound parameters; calls `on_row` for each row.
  Status Query(const std::string& sql, const std::vector<Value>& params,
               const std::function<void(const Row&)>& on_row = nullptr);
  // Runs `fn` in a transaction; commits if it returns ok, rolls back otherwise.
  Status Transaction(const std::function<Status()>& fn);
  int64_t Changes();

 private:
  Db() = default;
  Status QueryLocked(const std::string& sql, const std::vector<Value>& params,
                     const std::function<void(const Row&)>& on_row);
  sqlite3* db_ = nullptr;
  std::recursive_mutex mu_;
};

}  // namespace sbx::storage
