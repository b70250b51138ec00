#include "agent/users.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace sbx::agent {
namespace {

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    size_t p = line.find(sep);
    out.push_back(line.substr(0, p));
    if (p == std::string_view::npos) return out;
    line.remove_prefix(p + 1);
  }
}

bool ParseId(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v >= UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// Calls fn(fields) for each line of a colon-separated file with at least `min` fields.
template <typename Fn>
void EachLine(std::string_view text, size_t min, Fn fn) {
  for (std::string_view line : Split(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    auto f = Split(line, ':');
    if (f.size() >= min && fn(f)) return;
  }
}

std::string ReadSmallFile(const char* path) {
  std::string out;
  // A regular file only: a fifo put there would block, a device never end.
  int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return out;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return out;
  }
  char buf[8192];
  while (out.size() < (8u << 20)) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<Identity> FindUser(const std::string& user, std::string_view passwd, std::string_view group) {
  if (user.empty() || user.size() > 256 || user.find_first_of(":\n") != std::string::npos)
    return MakeError(Code::kInvalidArgument, "invalid user \"" + user + "\"");
  uint32_t numeric = 0;
  bool by_uid = ParseId(user, &numeric);
  Identity id;
  bool found = false;
  EachLine(passwd, 7, [&](const std::vector<std::string_view>& f) {
    uint32_t uid = 0, gid = 0;
    if (!ParseId(f[2], &uid) || !ParseId(f[3], &gid)) return false;
    if (by_uid ? uid != numeric : f[0] != user) return false;
    id.uid = uid;
    id.gid = gid;
    id.name = std::string(f[0]);
    id.home = f[5].empty() ? "/" : std::string(f[5]);
    found = true;
    return true;
  });
  if (!found) {
    if (!by_uid) return MakeError(Code::kNotFound, "no user \"" + user + "\" in the sandbox's /etc/passwd");
    id.uid = numeric;
    id.gid = numeric;
  }
  id.groups.push_back(id.gid);
  if (!id.name.empty()) {
    EachLine(group, 4, [&](const std::vector<std::string_view>& f) {
      uint32_t gid = 0;
      if (!ParseId(f[2], &gid)) return false;
      for (std::string_view member : Split(f[3], ','))
        if (member == id.name && std::find(id.groups.begin(), id.groups.end(), gid) == id.groups.end())
          id.groups.push_back(gid);
      return id.groups.size() >= 64;  // NGROUPS is larger; 64 is plenty
    });
  }
  return id;
}

Result<Identity> LookUpUser(const std::string& user) {
  return FindUser(user, ReadSmallFile("/etc/passwd"), ReadSmallFile("/etc/group"));
}

std::string NameOfId(uint32_t id, std::string_view table) {
  std::string name;
  EachLine(table, 3, [&](const std::vector<std::string_view>& f) {
    uint32_t v = 0;
    if (!ParseId(f[2], &v) || v != id) return false;
    name = std::string(f[0]);
    return true;
  });
  return name;
}

std::string UserNameOf(uid_t uid) {
  static const std::string passwd = ReadSmallFile("/etc/passwd");
  return NameOfId(uid, passwd);
}

std::string GroupNameOf(gid_t gid) {
  static const std::string group = ReadSmallFile("/etc/group");
  return NameOfId(gid, group);
}

namespace {
uint32_t g_id_count = UINT32_MAX;
}  // namespace

void LimitIds(uint32_t count) { g_id_count = count; }

bool IdsAllowed(const Identity& id) {
  if (id.uid >= g_id_count || id.gid >= g_id_count) return false;
  for (gid_t g : id.groups)
    if (g >= g_id_count) return false;
  return true;
}

}  // namespace sbx::agent
