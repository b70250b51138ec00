// A microVM's eth0 (its virtio-net device, whose host end is a tap that sbxd addressed and
// put under the sandbox's rules): the sandbox's addresses, up, and default routes through
// the host's end, as the container wall's link has them. Guest PID 1 only.
#pragma once

#include "agent/init/vm_init.h"
#include "base/result.h"

namespace sbx::agent {

// No-op when the config names no address (a sandbox with loopback only).
Status ConfigureVmNetwork(const VmConfig& cfg);

}  // namespace sbx::agent
