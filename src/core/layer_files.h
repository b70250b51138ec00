// Files of a sandbox's root as its layers hold them, read on the host before the sandbox
// runs (its shell, its users). Layers are listed top-most first, as an overlay stacks
// them; a tenant's layer may hold anything, so each path is resolved inside its layer
// (openat2 RESOLVE_IN_ROOT, no magic links, no crossing of mounts) and only a regular
// file is ever opened for reading.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace sbx::core {

// The contents of `rel` (a path inside the root, such as "etc/passwd") in the top-most
// layer that holds it, at most `max_bytes`. kNotFound when no layer holds it, or the
// top-most that does holds something else (a whiteout, a directory, a device, a FIFO).
Result<std::string> ReadLayerFile(const std::vector<std::string>& layers, const std::string& rel,
                                  size_t max_bytes = 1 << 20);

// True if the top-most layer holding `rel` holds a regular file there.
bool LayerHasFile(const std::vector<std::string>& layers, const std::string& rel);

// A user as a call may name one: empty, a name as useradd takes it
// ([a-z_][a-z0-9_.-]{0,31}, `$` at the end allowed), or a decimal uid below 2^32-1.
bool ValidUser(const std::string& u);

// Who a new sandbox's commands run as when a call names no one. `asked` is the create
// request's `user`: "" picks the image's own default, "user" where its /etc/passwd has
// that user and "root" otherwise; "root" or "0" is "root"; a uid is taken as it is; a
// name must be in the image's /etc/passwd (kInvalidArgument if not).
Result<std::string> SandboxUser(const std::vector<std::string>& layers, const std::string& asked);

}  // namespace sbx::core
