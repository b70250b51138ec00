// Sets up a microVM sandbox from inside: sbx-agent is the guest kernel's first process
// (`/init` of the initramfs sbxd builds, runtime/microvm/guest.h). It loads the kernel
// modules the initramfs holds, mounts the sandbox's root (an overlay of the layer disks,
// read-only, under the sandbox's own writable disk), switches into it, and sets up what a
// booted system has. The guest kernel is the wall: root inside is root of the guest only,
// so the agent keeps its capabilities and loads no filter of its own.
#pragma once

#include "agent/vm_config.h"
#include "base/result.h"

namespace sbx::agent {

// PID 1 of a microVM: sets up, then serves the agent over the port's channel mux. Returns
// only on a fatal error (the caller powers the guest off).
Status RunVmInit();

}  // namespace sbx::agent
