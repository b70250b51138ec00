// The in-sandbox agent's serve loop: accepts connections on a listening unix socket and runs
// one request per connection in a forked handler process, which dispatches it (ping, warm,
// exec, file op, port). Called from sbx-agent's main thread only (the agent is
// single-threaded).
#pragma once

#include <sys/types.h>

#include "base/result.h"

namespace sbx::agent {

// Serves forever on `listen_fd`. When `is_init` is true the agent is PID 1 of its sandbox:
// it reaps every orphan, and (with `outside_peers_only`) serves only peers outside the
// sandbox's pid namespace, for a socket the sandbox's code can reach too; with `only_peer`
// (a microVM's agent), it serves that process's connections only. Returns only on a
// fatal error.
Status Serve(int listen_fd, bool is_init, bool outside_peers_only = true, pid_t only_peer = 0);
// A folder on the sandbox's own disk (a microVM's), which kSync can freeze and thaw.
void SetOwnDisk(int fd);

}  // namespace sbx::agent
