// The file service's paths: every path a request names is resolved inside the sandbox's
// root with openat2 (RESOLVE_IN_ROOT, no magic links), and what is found there is described
// as an entry (see files.h). Shared by files.cc and file_archive.cc, in a handler process
// on its only thread.
#pragma once

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::agent {

constexpr uint64_t kInRoot = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
constexpr uint64_t kBeneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;

// openat2 of `path` under `dirfd` (always O_CLOEXEC; "" is `dirfd` itself), retried when
// a rename races the lookup. Returns the fd, or -1 with errno.
int Open2(int dirfd, const std::string& path, int flags, uint64_t resolve, mode_t mode = 0);
// Open2's resolution walked a component at a time (what Open2 does where the kernel has no
// openat2: gVisor's). `resolve`: RESOLVE_IN_ROOT or RESOLVE_BENEATH, and NO_SYMLINKS.
int WalkOpen(int dirfd, const std::string& path, int flags, uint64_t resolve, mode_t mode = 0);

// Refuses a path that is not absolute, is too long or holds a NUL byte.
Status CheckPath(const std::string& p, const char* what);
// "/a/b/" -> ("/a", "b"). The last component must be a real name.
Result<std::pair<std::string, std::string>> SplitPath(std::string p, const char* what);
// The folder `path`, resolved in `root`.
Result<UniqueFd> OpenDir(int root, const std::string& path, int flags = O_PATH);
// mkdir -p inside the root; each step resolved afresh in the root.
Status MkdirAll(int root, const std::string& path);
// The names of a path's components, without empty ones and "." ("/a//./b/" -> a, b;
// ".." is kept, for the caller to judge).
std::vector<std::string> Components(const std::string& path);
// `dir` + "/" + `name`, without doubling the root's slash.
std::string Join(const std::string& dir, const std::string& name);

// An entry: {"name","path","type","size","mode","uid","gid","owner","group","mtime_ms"}
// (owner and group: names in the sandbox's /etc/passwd and /etc/group, "" if none).
nlohmann::json EntryJson(const std::string& name, const std::string& path, const struct stat& st);
// The target of the link `name` in `dfd` ("" if none).
std::string ReadLinkAt(int dfd, const std::string& name);
// The names in the folder `dfd` (without "." and ".."), sorted.
Result<std::vector<std::string>> Names(int dfd);

}  // namespace sbx::agent
