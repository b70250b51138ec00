// Background processes that the agent owns. A kProcStart turns the handler process that
// took it into the command's keeper: it holds the command's pipes (or its terminal) and an
// output ring numbered by sequence, in the sandbox (so charged to the sandbox's memory),
// and it outlives sbxd's connection. sbxd reaches a keeper again with kProcAttach (the
// handler hands its connection over to the keeper, which answers what it knows, replays
// its ring from the asked sequence number and follows), lists the keepers with kProcList,
// and says it has everything of an ended command with kProcRelease (the keeper then exits).
// So a background process lives through a restart of sbxd and a hibernation: sbxd's
// connections close around the checkpoint, the keeper's listening socket is part of it.
//
// A keeper listens on the abstract unix name "sbx-proc/<serve loop pid>/<command pid>" in
// the sandbox's network namespace and serves only peers of its own user (root): other users
// of the sandbox cannot reach it; root can, as it can reach the processes themselves. Runs
// in a handler process, on its only thread.
#pragma once

#include <string>

#include "agent/protocol.h"

namespace sbx::agent {

// The serve loop's pid, which scopes the keepers' names (1 in a sandbox).
void SetKeeperScope(int serve_pid);

// kProcStart {"exec": ExecRequest, "ring_bytes"}: starts the command and keeps it (returns
// when the command ended and sbxd released it). A command that cannot start is answered as
// an exec would be (its stderr, then kExit 127) and nothing is kept.
void ServeProcStart(int sock, FrameDecoder* in, const std::string& payload);
// kProcAttach {"pid", "since"}: passes `sock` to that command's keeper, or answers not_found.
// sbxd sends nothing more on the connection until the keeper's kResult.
void ServeProcAttach(int sock, const std::string& payload);
// kProcList: answers kResult {"processes": [what each keeper knows]}.
void ServeProcList(int sock);

}  // namespace sbx::agent
