// What callers ask of the sandbox manager: plain structs, no I/O (the API decodes request
// bodies into them; see api/decode.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cancel.h"
#include "base/result.h"

namespace sbx::core {

struct CreateRequest {
  std::string type = "small";
  std::string isolation;  // empty: sbxd's default (--default-isolation)
  std::string name;
  std::string image;  // empty: the default image
  std::string from;   // a named snapshot to start from (its image is implied)
  std::optional<int64_t> ttl_seconds;
  std::string ttl_action = "stop";
  int64_t idle_timeout_seconds = 0;
  bool auto_resume = true;
  bool public_ports = false;  // `public`: the port proxy needs no credentials for it
  // false: setuid programs (su, sudo) raise privileges inside (never beyond the sandbox's
  // own user namespace); true, the default: nothing gains privileges by exec.
  bool no_new_privs = true;
  // Who its commands and file operations run as when a call names no one: "" for the
  // image's default ("user" where its /etc/passwd has one, else root), "root", a user of
  // the image, or a uid.
  std::string user;
  bool per_call = false;  // a serverless call's sandbox: billed per call, not per second
  bool no_env = false;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> metadata;
  // {"mode", "allow", "deny"} as the API took it (null: the daemon's default mode).
  nlohmann::json network;
  std::vector<std::pair<std::string, std::string>> disks;  // disk id or name, mount path
  // Optional overrides of the type's resources.
  std::optional<int> cpus;
  std::optional<int64_t> memory_mb;
  std::optional<int64_t> disk_mb;  // at most the type's
  std::optional<int> pids;
};

struct ExecRequest {
  std::vector<std::string> argv;  // already split; a string cmd becomes sh -c
  std::string cwd;
  std::map<std::string, std::string> env;
  std::optional<std::string> stdin_data;
  int64_t timeout_seconds = 60;
  int64_t arrival_us = 0;  // steady clock, when the request arrived
  bool tty = false;  // background processes: a pseudo-terminal of cols x rows
  int cols = 80, rows = 24;
  std::shared_ptr<CancelSignal> cancel;  // fires when the caller went away: the exec stops
  // Who runs it: empty, "root" or "0" for root; else a user of the sandbox (a name in its
  // /etc/passwd, or a uid), whose HOME is the default and whose home the default cwd.
  std::string user;
  bool as_root() const { return user.empty() || user == "root" || user == "0"; }
};

// PATCH of a sandbox's lifecycle policy: absent fields stay as they are.
struct UpdateRequest {
  std::optional<int64_t> ttl_seconds;  // restarts the TTL: expires_at = now + ttl_seconds
  std::optional<std::string> ttl_action;
  std::optional<int64_t> idle_timeout_seconds;
  std::optional<bool> auto_resume;
  std::optional<bool> public_ports;
};

// kInvalidArgument for an environment that a process cannot take (a name empty, over
// 1024 bytes or holding '=', a NUL anywhere); `what` names it in the message.
Status ValidateEnv(const std::map<std::string, std::string>& env, const char* what);

}  // namespace sbx::core
