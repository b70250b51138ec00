// What a sandbox's process tree looks like to CRIU before a dump: whether a restore
// could make it again. Internal to src/runtime/container.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace sbx::runtime {

// Why CRIU could save the tree under `init` (a host pid) but never restore it, or nothing.
// A process's session is inherited from its parent or made by setsid(), so CRIU restores
// one whose session leader has ended only as a child of init (through a helper that it
// forks as the leader): such a process below any other parent (a child subreaper that
// took the orphan in, such as the agent's handler of a command that has just answered)
// makes every restore fail.
std::optional<std::string> UnrestorableProcess(pid_t init);

}  // namespace sbx::runtime
