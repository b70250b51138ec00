// The agent's file service: the files API of one sandbox, served from inside it (so it
// works on every wall). Every path is resolved inside the sandbox's root with openat2's
// RESOLVE_IN_ROOT and no magic links: `..`, absolute symlinks and /proc/PID/root lead
// nowhere outside, and a rename race cannot swing a resolved path out either, because each
// operation works on the file descriptors it resolved, never on a path twice.
//
// Requests (the JSON of a kFileOp frame; paths are absolute inside the sandbox):
//   {"op":"stat","path"}                  -> kResult entry (the path itself; a symlink is
//                                            reported as one, with its "target")
//   {"op":"list","path","depth"}          -> kResult {"entries":[entry...],"truncated"}
//   {"op":"mkdir","path","parents"}       -> kResult {"created"}
//   {"op":"move","from","to","overwrite"} -> kResult {}
//   {"op":"remove","path","recursive"}    -> kResult {"removed"}
//   {"op":"read","path"}                  -> kResult entry, kData..., kDataEnd
//   {"op":"write","path","mode","parents","max_bytes","size"} -> kResult {"ready":true};
//                                            then the client sends kData... kDataEnd;
//                                            -> kResult {"size"}. More than max_bytes (the
//                                            disk) is refused as it comes, and a declared
//                                            size more than the disk or its free room at once
//   {"op":"archive_get","path"}           -> kResult {}, kData (a tar)..., kDataEnd
//   {"op":"archive_put","path","max_bytes"} -> kResult {"ready":true}; kData (a tar)...
//                                            kDataEnd; -> kResult {"files","bytes"}
//   {"op":"watch","path","recursive","keepalive_ms"} -> kResult {"path","recursive"} once
//                                            the folder is watched; then kData frames of
//                                            NDJSON events {"type":"create"|"write"|"remove"|
//                                            "rename","path","is_dir"[,"to"]} (and "keepalive",
//                                            "overflow", "error" lines) until sbxd hangs up, or
//                                            kDataEnd once the folder itself is gone
//                                            (file_watch.cc)
// Any request may carry "user" (a name or uid of the sandbox: the op runs with that user's
// ids and groups, so the kernel checks each access as theirs and what it makes is theirs)
// and "home_relative" (a path that is not absolute is taken from that user's home).
// An entry is {"name","path","type":"file"|"dir"|"symlink"|"other","size","mode","uid",
// "gid","owner","group","mtime_ms"[,"target"]}. Failures answer kError {"message","code"} with the API's codes.
// A write goes to a hidden temporary file beside the target, renamed over it only when the
// whole body has arrived: an aborted upload never leaves a partial file under the name.
// Written files get the mode asked for without setuid, setgid or sticky bits.
// files.cc serves the ops on one path (and dispatches); file_paths.cc resolves paths in
// the root; file_archive.cc serves the archives.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "agent/protocol.h"

namespace sbx::agent {

// Serves one kFileOp request on the blocking socket `sock`; `in` holds whatever the
// client sent after the request frame. `root_fd` is the directory paths resolve in.
void ServeFileOp(int sock, FrameDecoder* in, const std::string& request, int root_fd);
// The "watch" op (file_watch.cc).
void ServeWatch(int sock, const nlohmann::json& req, int root_fd);

}  // namespace sbx::agent
