// One exec in the agent: the command's process (spawned on pipes or a pseudo-terminal),
// its stdin, its output within the caps, keep-alives while it is quiet, its timeout, and
// the exit answer. Created by the serve loop for a kExec request, in the handler process
// of that connection, on its only thread.
#pragma once

#include <string>

#include "agent/protocol.h"

namespace sbx::agent {

class ExecSession {
 public:
  // `in` holds whatever the client sent after the request frame (stdin, signals, resizes).
  ExecSession(int sock, FrameDecoder* in) : sock_(sock), in_(in) {}
  // Runs `req` to its end and answers (kStdout/kStderr..., kExit, or kError). If sbxd goes
  // away first, the exec is cancelled: the command's whole tree is killed.
  void Run(const ExecRequest& req);

 private:
  void Queue(FrameType t, const char* data, size_t n) {
    out_ += EncodeHeader(t, static_cast<uint32_t>(n));
    out_.append(data, n);
  }
  bool Flush();  // non-blocking; false if the peer is gone

  int sock_;
  std::string out_;
  FrameDecoder* in_;
};

}  // namespace sbx::agent
