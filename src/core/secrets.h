// Secrets: daemon secrets (injected as env into every exec of a sandbox without no_env;
// stored sealed with the daemon key, held open in memory) and the sandboxes' scoped
// tokens (SBX_TOKEN: the sandbox's id signed with the same key). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/sync.h"
#include "storage/store.h"

namespace sbx::core {

class Secrets {
 public:
  // `key`: 32 raw bytes; empty turns secrets and tokens off (unit tests).
  Secrets(storage::Store* store, std::string key, std::function<int64_t()> now_ms)
      : store_(store), key_(std::move(key)), now_ms_(std::move(now_ms)) {}

  bool enabled() const { return !key_.empty(); }
  // Names are environment names ([A-Za-z_][A-Za-z0-9_]*, not SBX_*).
  Status Set(const std::string& name, const std::string& value);
  Result<std::vector<std::pair<std::string, int64_t>>> List() const;  // name, updated_ms
  Status Delete(const std::string& name);
  // Loads the sealed secrets into memory (at start).
  Status Load();
  // Adds every secret to `env`.
  void AddTo(std::map<std::string, std::string>& env) const;
  // Whether any secret is set.
  bool Any() const;

  // A sandbox's scoped token of generation `gen` ("" when off). Generation 0's is the
  // token of sandboxes from before generations.
  std::string TokenFor(const std::string& id, int64_t gen) const;
  // The sandbox id a token names, if it has the form of one (not yet checked).
  static std::optional<std::string> IdOfToken(const std::string& token);
  // True if `token` is TokenFor(id, gen) (compared in constant time).
  bool CheckToken(const std::string& token, const std::string& id, int64_t gen) const;
  // The access token of sandbox `id` that the E2B-compatible front hands out
  // (envdAccessToken): it may run commands and use files in that sandbox only. Never in
  // the sandbox's environment ("" when off).
  std::string AccessTokenFor(const std::string& id) const;
  // True if `token` is AccessTokenFor(id) (compared in constant time).
  bool CheckAccessToken(const std::string& id, const std::string& token) const;
  // A grant to reach `port` of sandbox `id` through the port proxy until `expires` (Unix
  // seconds): "EXPIRES.SIGNATURE" (an HMAC of the three with the same key), for signed
  // port URLs ("" when off).
  std::string PortGrant(const std::string& id, int port, int64_t expires) const;
  // True if `grant` is PortGrant(id, port, e) for an `e` not past `now` (Unix seconds).
  bool CheckPortGrant(const std::string& grant, const std::string& id, int port, int64_t now) const;

 private:
  storage::Store* store_;
  const std::string key_;
  std::function<int64_t()> now_ms_;
  mutable Mutex mu_;
  std::map<std::string, std::string> values_ SBX_GUARDED_BY(mu_);  // name -> value
};

}  // namespace sbx::core
