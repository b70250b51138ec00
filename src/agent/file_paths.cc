#include "agent/file_paths.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/frame_io.h"
#include "agent/users.h"

namespace sbx::agent {

using nlohmann::json;

int Open2(int dirfd, const std::string& path, int flags, uint64_t resolve, mode_t mode) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = mode;
  how.resolve = resolve;
  const char* p = path.empty() ? "." : path.c_str();
  int fd;
  do {
    fd = static_cast<int>(::syscall(SYS_openat2, dirfd, p, &how, sizeof how));
  } while (fd < 0 && errno == EAGAIN);  // a rename raced the lookup: try again
  return fd;
}

Status CheckPath(const std::string& p, const char* what) {
  if (p.empty() || p[0] != '/') return MakeError(Code::kInvalidArgument, std::string(what) + " must be an absolute path");
  if (p.size() > 4096) return MakeError(Code::kInvalidArgument, std::string(what) + " is too long");
  if (p.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, std::string(what) + " holds a NUL byte");
  return OkStatus();
}

Result<std::pair<std::string, std::string>> SplitPath(std::string p, const char* what) {
  SBX_RETURN_IF_ERROR(CheckPath(p, what));
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  std::string base = p.substr(slash + 1);
  if (base.empty() || base == "." || base == "..")
    return MakeError(Code::kInvalidArgument, std::string(what) + " must name a file or folder, not " + (base.empty() ? "/" : base));
  return std::make_pair(slash == 0 ? std::string("/") : p.substr(0, slash), base);
}

Result<UniqueFd> OpenDir(int root, const std::string& path, int flags) {
  UniqueFd fd(Open2(root, path, flags | O_DIRECTORY, kInRoot));
  if (!fd.valid()) return Errno(errno, path);
  return fd;
}

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    std::string comp = path.substr(pos, next - pos);
    pos = next + 1;
    if (!comp.empty() && comp != ".") out.push_back(std::move(comp));
  }
  return out;
}

Status MkdirAll(int root, const std::string& path) {
  std::string so_far = "/";
  for (const std::string& comp : Components(path)) {
    if (comp == "..") {
      so_far += (so_far.back() == '/' ? "" : "/") + comp;
      continue;
    }
    auto parent = OpenDir(root, so_far);
    if (!parent.ok()) return parent.error();
    if (::mkdirat(parent->get(), comp.c_str(), 0755) != 0 && errno != EEXIST)
      return Errno(errno, "mkdir " + so_far + (so_far.back() == '/' ? "" : "/") + comp);
    so_far += (so_far.back() == '/' ? "" : "/") + comp;
  }
  auto check = OpenDir(root, path);
  if (!check.ok()) return check.error();
  return OkStatus();
}

json EntryJson(const std::string& name, const std::string& path, const struct stat& st) {
  const char* type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink" : "other";
  return {{"name", name},
          {"path", path},
          {"type", type},
          {"size", static_cast<int64_t>(st.st_size)},
          {"mode", st.st_mode & 07777},
          {"uid", st.st_uid},
          {"gid", st.st_gid},
          {"owner", UserNameOf(st.st_uid)},
          {"group", GroupNameOf(st.st_gid)},
          {"mtime_ms", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000}};
}

std::string ReadLinkAt(int dfd, const std::string& name) {
  char buf[4096];
  ssize_t n = ::readlinkat(dfd, name.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

Result<std::vector<std::string>> Names(int dfd) {
  int dup = ::fcntl(dfd, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (!d) {
    int err = errno;
    if (dup >= 0) ::close(dup);
    return Errno(err, "read the folder");
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace sbx::agent
