// Reaper: sbxd is a child subreaper; this thread reaps every child and orphan at once
// (the host's PID 1 may take seconds). Run() spawns a helper command and waits for it
// without racing the reaper. Start() from main before other threads, with SIGCHLD blocked.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "base/result.h"

namespace sbx {

// The UTS namespace (host name) a command of Reaper::Run runs in: sbxd's (the default),
// the one open at `join` (a descriptor of /proc/PID/ns/uts), or a new one named
// `fresh_name`. Set in the forked child before it takes its uid.
struct RunUts {
  int join = -1;
  std::string fresh_name;
};

class Reaper {
 public:
  static Reaper& Get();
  // Becomes a child subreaper and starts the reaping thread.
  Status Start();
  bool started() const { return started_; }

  struct RunResult {
    int exit_code;  // 128+signal if killed
    std::string output;  // stdout and stderr together, capped at 64 KiB
    bool timed_out = false;
  };
  // Runs argv (PATH-searched) with stdin from /dev/null; waits for it. With `euid`, the
  // command runs with that real and effective uid and sbxd's capabilities (ambient): a user
  // namespace owned by `euid` is then its own, and the ones it creates are owned by it.
  // `before_exec`, if given, runs in sbxd with the command's pid before the command starts
  // (to place it in a cgroup, say); its failure kills the command and is returned.
  // `timeout_ms` > 0: past it the command is killed (SIGKILL; exit code 137) and
  // `timed_out` is set.
  Result<RunResult> Run(const std::vector<std::string>& argv, const std::string& cwd = "", uid_t euid = 0,
                        const std::function<Status(pid_t)>& before_exec = nullptr, int64_t timeout_ms = 0,
                        const std::string& output_file = "", const RunUts& uts = {});
  // With `output_file`, the command's stdout and stderr are appended to that file instead
  // (`output` stays empty): for a command that leaves processes behind holding them.

 private:
  void Loop();
  bool started_ = false;
};

}  // namespace sbx
