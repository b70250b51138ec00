// The sandbox's own file of who it is, /run/sbx.env: `SBX_SANDBOX_ID=...` and
// `SBX_TOKEN=...` lines that sbxd keeps current. A process that lives across a memory
// capture (a background process, a code context, anything a copy of a memory template
// comes back with) holds the environment it started with, whose token the capture killed;
// the file names the sandbox it runs in now, with its live token. sbxd sends the content
// with every command it starts (written before the command runs, when it differs) and on
// its own after a capture or a restore that loaded memory (kSync {"self_env": ...}).
#pragma once

#include <string>

#include "agent/protocol.h"  // kSelfEnvPath
#include "base/result.h"

namespace sbx::agent {

// Only an agent inside a sandbox writes the file (one serving outside, in development,
// would write the host's /run).
void EnableSelfEnv(bool in_sandbox);
// Writes `content` to kSelfEnvPath (mode 0644, replaced whole by a rename, never through
// a link) unless it holds that already. A no-op outside a sandbox.
Status SyncSelfEnv(const std::string& content);

}  // namespace sbx::agent
