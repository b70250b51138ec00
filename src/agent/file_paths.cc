#include "agent/file_paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
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

// openat2's resolution, one component at a time, for kernels without it (gVisor's):
// every step opens one name with O_NOFOLLOW below a folder this walk holds, `..` goes
// back along the walk (never through the file system's own `..`, so a folder moved away
// cannot lead out), and symbolic links are read and resolved here, absolute ones from the
// start folder (RESOLVE_IN_ROOT) or refused (RESOLVE_BENEATH, as is `..` above the start).
// A magic link of /proc is read as text like any link, so none jumps anywhere.
int WalkOpen(int dirfd, const std::string& path, int flags, uint64_t resolve, mode_t mode) {
  const bool beneath = resolve & RESOLVE_BENEATH;
  std::vector<UniqueFd> walk;
  walk.emplace_back(::openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!walk.back().valid()) return -1;
  auto fail = [](int err) {
    errno = err;
    return -1;
  };
  std::vector<std::string> todo = Components(path);  // consumed from the back
  std::reverse(todo.begin(), todo.end());
  if (!path.empty() && path[0] == '/' && beneath) return fail(EXDEV);
  int links = 0;
  while (!todo.empty()) {
    std::string comp = std::move(todo.back());
    todo.pop_back();
    const bool last = todo.empty();
    if (comp == "..") {
      if (walk.size() == 1) {
        if (beneath) return fail(EXDEV);
      } else {
        walk.pop_back();
      }
      continue;
    }
    const int here = walk.back().get();
    UniqueFd fd(last ? ::openat(here, comp.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
                     : ::openat(here, comp.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    bool is_link = false;
    if (!fd.valid()) {
      // A link that this open would not take with O_NOFOLLOW (ELOOP; ENOTDIR with
      // O_DIRECTORY): followed below unless the caller said O_NOFOLLOW.
      const int err = errno;
      struct stat st;
      if (!last || (err != ELOOP && err != ENOTDIR) || (flags & O_NOFOLLOW) ||
          ::fstatat(here, comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode))
        return fail(err);
      is_link = true;
    } else {
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return -1;
      is_link = S_ISLNK(st.st_mode);
      if (is_link && last && (flags & O_NOFOLLOW)) return fd.Release();  // O_PATH | O_NOFOLLOW: the link itself
      if (!is_link && last) return fd.Release();
      if (!is_link && !S_ISDIR(st.st_mode)) return fail(ENOTDIR);
    }
    if (!is_link) {
      walk.push_back(std::move(fd));
      continue;
    }
    if ((resolve & RESOLVE_NO_SYMLINKS) || ++links > 40) return fail(ELOOP);
    char buf[4096];
    ssize_t n = ::readlinkat(here, comp.c_str(), buf, sizeof buf);
    if (n < 0) return -1;
    if (n == static_cast<ssize_t>(sizeof buf)) return fail(ENAMETOOLONG);
    std::string target(buf, static_cast<size_t>(n));
    // The magic links of /proc (a process's root, cwd, exe, open files) read as absolute
    // paths (or "pipe:[N]", which names nothing here): those are refused, as openat2
    // refuses them. /proc's plain links (self, net, mounts) are relative and followed.
    struct statfs fsinfo;
    if ((resolve & RESOLVE_NO_MAGICLINKS) && !target.empty() && target[0] == '/' && ::fstatfs(here, &fsinfo) == 0 &&
        fsinfo.f_type == PROC_SUPER_MAGIC)
      return fail(ELOOP);
    if (!target.empty() && target[0] == '/') {
      if (beneath) return fail(EXDEV);
      walk.resize(1);
    }
    std::vector<std::string> more = Components(target);
    for (auto it = more.rbegin(); it != more.rend(); ++it) todo.push_back(std::move(*it));
  }
  // The path ended at a folder of the walk ("", "/", "..").
  return ::openat(walk.back().get(), ".", flags | O_CLOEXEC, mode);
}

int Open2(int dirfd, const std::string& path, int flags, uint64_t resolve, mode_t mode) {
  // Kernels without openat2 (gVisor's) get the same resolution walked here.
  static bool have_openat2 = true;
  if (!have_openat2) return WalkOpen(dirfd, path, flags, resolve, mode);
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = mode;
  how.resolve = resolve;
  const char* p = path.empty() ? "." : path.c_str();
  int fd;
  do {
    fd = static_cast<int>(::syscall(SYS_openat2, dirfd, p, &how, sizeof how));
  } while (fd < 0 && errno == EAGAIN);  // a rename raced the lookup: try again
  if (fd < 0 && errno == ENOSYS) {
    have_openat2 = false;
    return WalkOpen(dirfd, path, flags, resolve, mode);
  }
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
