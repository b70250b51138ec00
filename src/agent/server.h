// The in-sandbox agent's serve loop: accepts connections on a listening unix socket and runs
// one request per connection in a forked handler process, which dispatches it (ping, warm,
// exec, file op, port). Called from sbx-agent's main thread only (the agent is
// single-threaded).
#pragma once

#include <sys/types.h>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::agent {

// Serves forever on `listen_fd`. When `is_init` is true the agent is PID 1 of its sandbox:
// it reaps every orphan, and (with `outside_peers_only`) serves only peers outside the
// sandbox's pid namespace, for a socket the sandbox's code can reach too; with `only_peer`
// (a microVM's agent), it serves that process's connections only. Returns only on a
// fatal error.
Status Serve(int listen_fd, bool is_init, bool outside_peers_only = true, pid_t only_peer = 0);
// A folder on the sandbox's own disk (a microVM's), which kSync can freeze and thaw.
void SetOwnDisk(int fd);
// For a listening socket that a checkpoint cannot hold (gVisor's host sockets): with this
// set, SIGUSR1 to PID 1 closes the listening socket (and ends the spare handlers, which
// share it), then calls `closed` (which says so where sbxd sees it), and SIGUSR2 listens
// again with `relisten` (which returns the new socket). sbxd sends both from outside
// (runsc kill) around a checkpoint: SIGUSR2 after a restore, or after a save that failed.
// A SIGUSR2 while listening, or a SIGUSR1 while closed, does nothing. Call before Serve,
// which then owns its listening socket.
void SetRelisten(Result<UniqueFd> (*relisten)(), void (*closed)());

}  // namespace sbx::agent
