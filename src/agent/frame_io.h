// How the agent's handlers talk to sbxd on their connection: blocking frame reads and
// writes, and errors as answers. Used by the serve loop, the exec session, the file
// service and the port relay, each in a handler process on its only thread.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "agent/protocol.h"
#include "base/result.h"

namespace sbx::agent {

// File data is read and sent in kData frames of about this size.
constexpr size_t kDataChunk = 256 * 1024;

// Writes all of `s` to `fd`, waiting for room when `fd` is non-blocking; false when the
// write fails.
bool WriteAllBlocking(int fd, const std::string& s);
// Sends all of `s` on the blocking socket `fd`; false when the peer is gone.
bool SendAll(int fd, std::string_view s);
// Sends one frame.
bool Send(int sock, FrameType t, std::string_view payload);
// Sends `j` as a kResult frame (invalid UTF-8 replaced).
bool SendJson(int sock, const nlohmann::json& j);

// The next frame from the client (blocking); false when it is gone or sent garbage.
bool NextFrame(int sock, FrameDecoder* in, Frame* f);

// Answers kError {"message","code"}, the code as the API names it.
void SendError(int sock, const Error& e);
// Answers kError {"message"} without a code (a refused exec or an unknown request).
void SendErrorMessage(int sock, const std::string& msg);
// An errno as an API error about `what`: the code from CodeOfErrno (the table sbxd uses
// too), the message in the agent's words for a full disk and a move across mounts.
Error Errno(int err, const std::string& what);

}  // namespace sbx::agent
