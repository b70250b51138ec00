// A microVM's eth0 (its virtio-net device, whose host end is a tap that sbxd addressed and
// put under the sandbox's rules): the sandbox's addresses, up, and default routes through
// the host's end, as the container wall's link has them. Guest PID 1 only.
#pragma once

#include "agent/init/vm_init.h"
#include "base/result.h"

namespace sbx::agent {

// No-op when the config names no address (a sandbox with loopback only).
Status ConfigureVmNetwork(const VmConfig& cfg);
// A VM restored from another sandbox's memory takes this sandbox's addresses: eth0 goes
// down (its IPv6 addresses and every route through it go) and comes up with `net_json`'s
// (VmConfig's address, gateway, prefix, address6, gateway6).
Status ReaddressVmNetwork(const std::string& net_json);

}  // namespace sbx::agent
