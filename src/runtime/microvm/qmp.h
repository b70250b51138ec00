// A blocking client of QEMU's machine protocol (QMP) on a VM's monitor socket, for what
// sbxd asks of a running QEMU beyond its agent: stop and go on (`stop`, `cont`), its
// state (`query-status`), and saving or loading its memory (`migrate` to a descriptor it
// passes over the socket). QEMU runs as the VM's unprivileged user and may be driven by
// a hostile guest: every answer is bounded in size and time, and the socket is taken
// only when that user serves it. One thread at a time per client.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::runtime::microvm {

// Milliseconds until `deadline` (0 once it passed).
int MsLeft(std::chrono::steady_clock::time_point deadline);

class Qmp {
 public:
  // Connects to the socket `name` in the folder `dir` (QEMU's), served by `uid`, and
  // enters command mode. Waits up to `timeout_ms` for QEMU to make its socket.
  static Result<Qmp> Connect(const std::string& dir, const std::string& name, uid_t uid, int timeout_ms);

  // Runs `command` with `args` and returns its "return" value; a QMP error is an error
  // with QEMU's words. `pass_fd` (>= 0) goes along with the command (SCM_RIGHTS), as
  // `getfd` wants.
  Result<nlohmann::json> Execute(const std::string& command, const nlohmann::json& args = nullptr,
                                 int pass_fd = -1);
  // The VM's run state ("running", "paused", "inmigrate", "postmigrate", ...).
  Result<std::string> RunState();
  // Polls `query-migrate` until the migration ends; OK when it completed.
  Status WaitMigration(int timeout_ms);

  void set_deadline_ms(int ms) { per_call_ms_ = ms; }

 private:
  explicit Qmp(UniqueFd fd) : fd_(std::move(fd)) {}
  Result<nlohmann::json> ReadMessage(std::chrono::steady_clock::time_point deadline);
  Status Send(const std::string& line, int pass_fd);

  UniqueFd fd_;
  std::string buf_;
  int per_call_ms_ = 30000;
};

}  // namespace sbx::runtime::microvm
