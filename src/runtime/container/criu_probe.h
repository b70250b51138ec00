// Whether a CRIU binary can checkpoint on this kernel. `criu check` passes on kernels
// where a dump then never ends (seen on a 6.18 kernel: after the parasite's work, the
// task's last trap never comes and CRIU waits for it for ever), so sbxd takes a CRIU for
// hibernate only once it has checkpointed a throwaway process in time.
#pragma once

#include <string>

#include "base/result.h"

namespace sbx::runtime {

// Dumps a `sleep` started for the purpose (in a session of its own) into a temporary
// folder, within `timeout_ms` (twice, if the first try timed out). The verdict is kept for the boot under /run/sbx, keyed by
// the binary (path, size, mtime) and the kernel (release and version), so only the first
// sbxd to start after a boot (or a new build) pays for it.
Status CriuCanCheckpoint(const std::string& criu, int64_t timeout_ms = 10000);

}  // namespace sbx::runtime
