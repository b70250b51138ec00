// The walls this sbxd offers beyond the container: the tools they need, found on this host.
#pragma once

#include <string>

#include "base/result.h"

namespace sbx {

// The CRIU for hibernate: --criu's ("none": off), or the first of the set-up's build
// ($SBX_CACHE_DIR/criu) and those on PATH that passes `criu check` and checkpoints a test
// process here. "" when none does (the log says why).
Result<std::string> FindCriu(const std::string& flag);

// The runsc for isolation "gvisor": --runsc's ("none": off), else the set-up's
// ($SBX_CACHE_DIR/runsc/runsc, from Debian's backports: it has the systrap platform),
// else `runsc` on PATH; only one that answers `--version`. "" when none does.
std::string FindRunsc(const std::string& flag);

}  // namespace sbx
