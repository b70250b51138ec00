// Bytes as a stream from a sandbox's agent (which runs inside the sandbox, so sbxd must
// treat it as hostile): the frame decoder fed in uneven pieces, and each frame's JSON.
#include <cstddef>
#include <cstdint>

#include "agent/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sbx::agent;
  FrameDecoder d;
  size_t off = 0, step = size ? (data[0] % 7) + 1 : 1;
  while (off < size) {
    size_t n = std::min(step, size - off);
    d.Feed(reinterpret_cast<const char*>(data + off), n);
    off += n;
    bool broken = false;
    while (true) {
      auto f = d.Next();
      if (!f.ok()) broken = true;
      if (!f.ok() || !f->has_value()) break;
      const Frame& fr = **f;
      if (fr.type == FrameType::kExit) (void)ExitInfo::FromJson(fr.payload);
      if (fr.type == FrameType::kExec) (void)ExecRequest::FromJson(fr.payload);
    }
    if (broken) break;  // sbxd drops a connection at its first malformed frame
  }
  if (size >= 8) (void)DecodeHeader(data);
  return 0;
}
