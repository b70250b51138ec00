// Who a command runs as: a user of the sandbox, looked up in its own /etc/passwd and
// /etc/group (the agent is static: no NSS). Pure parsing; the agent reads the files.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace sbx::agent {

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary: the primary group and every group listing the user
  std::string name;           // empty for a numeric uid without a passwd line
  std::string home = "/";
};

// `user` is a name or a decimal uid (0 to 2^32-2). A name must have a line in `passwd`;
// a uid without one runs with gid = uid, no other group, home "/". kNotFound otherwise,
// kInvalidArgument for a malformed request.
Result<Identity> FindUser(const std::string& user, std::string_view passwd, std::string_view group);

// The same against the sandbox's /etc/passwd and /etc/group (missing files are empty).
Result<Identity> LookUpUser(const std::string& user);

// The name of a uid (a gid) in `passwd` (`group`); "" when no line has it.
std::string NameOfId(uint32_t id, std::string_view table);
// The same against the sandbox's files, read once per process (a handler serves one
// request: a listing of thousands of entries reads them once).
std::string UserNameOf(uid_t uid);
std::string GroupNameOf(gid_t gid);

// The ids a command may take on: [0, count). The kernel enforces the user namespace's map
// on the container wall; gVisor's kernel takes any id, so its agent is given the map's size
// and refuses the rest as the container's kernel does (EINVAL). Default: no limit.
void LimitIds(uint32_t count);
bool IdsAllowed(const Identity& id);

}  // namespace sbx::agent
