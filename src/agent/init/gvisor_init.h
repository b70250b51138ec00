// Sets up a gVisor sandbox from inside: sbx-agent runs this as the first process of a
// runsc container. runsc made the root, /proc, /dev, /tmp, the disks' binds, the hostname
// and the user mappings from the bundle sbxd wrote (src/runtime/gvisor/); what is left is
// the agent's socket, out of reach of the sandbox's code, its resolver, and the agent's
// own privileges. Main thread of sbx-agent only, before any sandbox code runs.
#pragma once

#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::agent {

// `ctl_dir` is a host folder bound into the sandbox, holding sbxd's `init.json`
// ({"nameserver", "no_new_privs", "id_count"}). The agent listens on `a.sock` there (runsc makes it a
// host socket, which sbxd dials), then unmounts the folder: no process of the sandbox can
// reach the socket after that. Returns the listening socket.
Result<UniqueFd> InitGvisorSandbox(const std::string& ctl_dir);
// The same socket again, for Serve's SetRelisten: a checkpoint cannot hold a host socket,
// so the agent closes it around one and listens anew after (the folder stays open).
Result<UniqueFd> RelistenGvisorAgent();
// Says that the agent closed its socket for a checkpoint: the socket's file goes.
void GvisorAgentClosed();

}  // namespace sbx::agent
