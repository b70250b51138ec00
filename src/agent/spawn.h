// Starting one command in the agent: its stdio on pipes or on a new pseudo-terminal, in a
// session of its own, and the exit answer from its wait status. Shared by the exec session
// (a command tied to its connection) and the process keeper (a background command that
// outlives sbxd's connections). Handler processes only; nothing here keeps state.
#pragma once

#include <sys/types.h>

#include <string>

#include "agent/protocol.h"
#include "base/unique_fd.h"

namespace sbx::agent {

struct Spawned {
  pid_t pid = -1;       // -1: the command did not start; `failure` says why
  std::string failure;  // "sbx: exec NAME: ...\n", as the command's stderr would have it
  UniqueFd out;         // its stdout (the terminal's master with a tty)
  UniqueFd err;         // its stderr (stays empty with a tty)
  UniqueFd in;          // its stdin when req.stdin_open (the master with a tty)
  UniqueFd master;      // the terminal, for resizes (tty only)
  std::string cwd;      // where it started: req.cwd, else the user's home or /; "" for the agent's own
};

// Makes the caller a child subreaper (orphans of the command stay below it), then starts
// `req` with posix_spawn: default signal dispositions, an empty mask, only fds 0-2 open,
// in req.cwd. The fds come back non-blocking. An error only when no pipe or terminal could
// be made; a command that cannot start is a Spawned with pid -1.
Result<Spawned> SpawnCommand(const ExecRequest& req);

// The exit answer for a wait status (a command that did not start exits 127).
ExitInfo ExitOf(int status, bool started);

// A terminal's new size from a kResize payload {"cols","rows"} (clamped to 1..10000).
void ResizeTerminal(int master, const std::string& payload);

}  // namespace sbx::agent
