// The file service's archives (see files.h): a folder's tree sent as a tar stream, and a
// tar stream (gzip'd or not) unpacked into a folder with every entry kept beneath it.
// Called by ServeFileOp in a handler process, on its only thread.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "agent/protocol.h"

namespace sbx::agent {

// {"op":"archive_get","path"}: answers kResult {}, kData (a tar)..., kDataEnd.
void ArchiveGet(int sock, int root, const nlohmann::json& req);
// {"op":"archive_put","path","max_bytes"}: answers kResult {"ready":true}, takes kData
// (a tar)... kDataEnd, answers kResult {"files","bytes"}.
void ArchivePut(int sock, FrameDecoder* in, int root, const nlohmann::json& req);

}  // namespace sbx::agent
