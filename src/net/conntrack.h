// The kernel's connection tracking table, through ctnetlink: forgetting a sandbox's
// connections when it goes, so that a later sandbox given the same address can never
// match them (a reply to the old one must not be taken for the new one's).
#pragma once

#include <cstdint>

#include "base/result.h"

namespace sbx::net {

// Deletes every IPv4 connection whose mark is `mark` (the firewall marks each new
// connection of a sandbox with its own).
Status ForgetConnections(uint32_t mark);

}  // namespace sbx::net
