// The agent's port relay: lets sbxd reach a TCP server inside the sandbox. Called in a
// handler process, on its only thread.
#pragma once

#include <string>

#include "agent/protocol.h"

namespace sbx::agent {

// Serves one kPortOpen request: dials the port on this network namespace's loopback and,
// once connected, copies bytes both ways until either side closes.
void ServePortOpen(int sock, FrameDecoder* in, const std::string& request);

}  // namespace sbx::agent
