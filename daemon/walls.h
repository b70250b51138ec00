// The walls this sbxd offers beyond the container: the tools they need, found on this host.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"
#include "runtime/runtime.h"

namespace sbx {

// The CRIU for hibernate: --criu's ("none": off), or the first of the set-up's build
// ($SBX_CACHE_DIR/criu) and those on PATH that passes `criu check` and checkpoints a test
// process here. "" when none does (the log says why).
Result<std::string> FindCriu(const std::string& flag);

// The runsc for isolation "gvisor": --runsc's ("none": off), else the set-up's
// ($SBX_CACHE_DIR/runsc/runsc, from Debian's backports: it has the systrap platform),
// else `runsc` on PATH; only one that answers `--version`. "" when none does.
std::string FindRunsc(const std::string& flag);

// The microVM wall, with --qemu's QEMU ("none": off; empty: qemu-system-x86_64 on PATH)
// and --microvm-kernel's guest kernel (empty: the newest the set-up made under
// $SBX_CACHE_DIR/vm/guest). Null when either is missing (the log says why); an error for a
// wrong flag. `o` has the rest of the wall's options.
Result<std::unique_ptr<runtime::Runtime>> OpenMicrovm(const std::string& qemu_flag, const std::string& kernel_flag,
                                                     runtime::MicrovmOptions o);

}  // namespace sbx
