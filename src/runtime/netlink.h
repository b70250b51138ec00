// A sandbox's link to the host, made with rtnetlink: a veth pair whose inner end is the
// sandbox's `eth0` (a point-to-point /31, and a /127 with IPv6, with the host's end as its
// gateway). For walls whose sandbox has a network namespace of its own (the container;
// gVisor's netstack sits behind one too).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/result.h"
#include "runtime/runtime.h"

namespace sbx::runtime::netlink {

// Creates the pair with its inner end, `eth0`, in the network namespace `netns_fd`, and
// configures both ends (addresses, up, the sandbox's default routes; IPv6 only if the link has it).
// A leftover link of the same host name (a namespace still being torn down) is replaced.
// `pace` (with link.mbps): `eth0` sends through a token bucket queue at that rate, so a
// sender meets a full queue (it waits) before the host's firewall drops anything.
Status AttachVeth(const NetLink& link, int netns_fd, bool pace = false);
// Creates the pair with both ends on the host, the inner one named `peer`, for CRIU's
// restore to move into the restored namespace (as `eth0`, addressed as it was).
Status CreateHostPair(const NetLink& link, const std::string& peer);
// Configures the host's end of a pair (after CRIU's restore).
Status ConfigureHostEnd(const NetLink& link);
// A microVM's link: a persistent tap named link.host_if that `owner` may attach to (QEMU
// opens it by name), configured as the host's end of a pair. A leftover of that name is
// replaced.
Status CreateTap(const NetLink& link, uid_t owner);
// Deletes the host's end (and with it the pair); no error if it is gone.
Status DeleteLink(const std::string& host_if);
// Takes the host's end down now (no traffic passes) and deletes that very link (by its
// index, so a new link of the same name is not touched) on a thread of its own.
Status DeleteLinkLater(const std::string& host_if);
// Whether a link of this name exists on the host.
bool LinkExists(const std::string& host_if);

// What went through the host's end so far, as the sandbox sees it (sent, received).
std::optional<LinkCounters> ReadCounters(const std::string& host_if);

}  // namespace sbx::runtime::netlink
