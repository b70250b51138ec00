// Many agent connections over one byte stream: the microVM wall's link between sbxd and
// the agent in the guest (a virtio-serial port, since this wall may have no vsock). The
// host end (a relay process beside QEMU, `sbx-agent --vm-relay`) accepts connections on a
// unix socket and opens a channel for each; the guest end (a child of the agent, PID 1)
// connects each new channel to the agent's own listening socket. Each end then copies
// bytes between its local socket and its channel.
//
// Frames on the link have the agent protocol's 8-byte header, with the three bytes that
// protocol reserves carrying the channel: u32 little-endian payload length, u8 type,
// u24 little-endian channel id; then the payload. The payload of a data frame is a piece
// of the connection's byte stream, whatever it holds (agent frames, or a port's raw
// bytes). Each channel has a window per direction: an end sends at most kMuxWindow bytes
// that the other has not acknowledged with a credit frame, and the other buffers up to
// that much, so a connection whose reader stalls never holds up the others on the link.
// Single-threaded: RunMux owns every descriptor it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::agent {

enum class MuxFrame : uint8_t {
  kOpen = 0x81,    // host to guest: a new channel
  kData = 0x82,    // bytes of the channel's stream
  kEof = 0x83,     // the sender's side of the stream ended (a half close)
  kClose = 0x84,   // the channel is gone (either way): drop it
  kCredit = 0x85,  // u32 payload: that many more bytes may be sent
  kReset = 0x86,   // host to guest: a new host end; every channel of the earlier one is gone
};
constexpr uint32_t kMuxWindow = 256 * 1024;
constexpr uint32_t kMuxMaxChannel = (1u << 24) - 1;

struct MuxOptions {
  // Host end: connections accepted here become channels. -1 at the guest end.
  int listen_fd = -1;
  // Guest end: a local connection for a channel the host opened (an invalid fd: refused).
  std::function<UniqueFd()> connect;
  // The link's read end saw end of file (the other end went). The guest's port reads as
  // ended while no host end is attached: with `wait_for_peer`, RunMux then drops every
  // channel and waits for one (polling); without, it returns.
  bool wait_for_peer = false;
};

// Runs until the link ends (or fails). `link` is read and written without blocking.
Status RunMux(int link, const MuxOptions& opts);

// Encodes one frame's header (the caller appends the payload).
std::string MuxHeader(MuxFrame type, uint32_t channel, uint32_t length);

}  // namespace sbx::agent
