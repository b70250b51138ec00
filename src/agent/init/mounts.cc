#include "agent/init/mounts.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sbx::agent {

Status Mount(const char* src, const std::string& target, const char* type, unsigned long flags,
             const std::string& data) {
  if (::mount(src, target.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) != 0)
    return ErrnoError(std::string("mount ") + (type ? type : src ? src : "") + " on " + target);
  return OkStatus();
}

// Makes `path` (inside the new root) a real directory; refuses symlinks and other types,
// so a hostile image cannot redirect a mount.
Status EnsureDir(const std::string& path, mode_t mode) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return MakeError(Code::kFailedPrecondition, "image: " + path + " is not a directory");
    return OkStatus();
  }
  if (::mkdir(path.c_str(), mode) != 0) return ErrnoError("mkdir " + path);
  return OkStatus();
}

Status EnsureFile(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return MakeError(Code::kFailedPrecondition, path + " is not a regular file");
    return OkStatus();
  }
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoError("create " + path);
  ::close(fd);
  return OkStatus();
}

Status BindReadOnly(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return OkStatus();  // absent on this kernel
  SBX_RETURN_IF_ERROR(Mount(path.c_str(), path, nullptr, MS_BIND | MS_REC));
  return Mount(nullptr, path, nullptr,
               MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

// Hides a file behind /dev/null, or a directory behind an empty read-only tmpfs.
Status Mask(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return OkStatus();
  if (S_ISDIR(st.st_mode))
    return Mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0");
  return Mount("/dev/null", path, nullptr, MS_BIND);
}

// Creates each directory of `rel` (absolute inside the root) below `root`, refusing
// symlinks and non-directories on the way, so an image cannot redirect a mount.
Status EnsureDirsUnder(const std::string& root, const std::string& rel) {
  std::string path = root;
  size_t i = 1;
  while (i <= rel.size()) {
    size_t j = rel.find('/', i);
    if (j == std::string::npos) j = rel.size();
    std::string part = rel.substr(i, j - i);
    if (part.empty() || part == "." || part == "..")
      return MakeError(Code::kInvalidArgument, "bad mount path " + rel);
    path += "/" + part;
    SBX_RETURN_IF_ERROR(EnsureDir(path));
    i = j + 1;
  }
  return OkStatus();
}

}  // namespace sbx::agent
