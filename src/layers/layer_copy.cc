#include "layers/layer_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "base/unique_fd.h"

namespace sbx::layers {
namespace {

struct Copier {
  CopyStats stats;
  std::map<std::pair<dev_t, ino_t>, std::string> links;  // first path of each hard link

  Status CopyXattrs(int sfd, int dfd, const std::string& path) {
    char names[65536];
    ssize_t n = ::flistxattr(sfd, names, sizeof names);
    if (n < 0) {
      if (errno == ENOTSUP) return OkStatus();
      return ErrnoError("listxattr " + path);
    }
    std::vector<char> val(65536);
    for (ssize_t i = 0; i < n; i += std::strlen(names + i) + 1) {
      const char* name = names + i;
      ssize_t v = ::fgetxattr(sfd, name, val.data(), val.size());
      if (v < 0) continue;
      if (::fsetxattr(dfd, name, val.data(), v, 0) != 0 && errno != ENOTSUP)
        return ErrnoError(std::string("setxattr ") + name + " on " + path);
    }
    return OkStatus();
  }

  // The same for a path that cannot be opened (symlinks, devices, fifos).
  Status CopyXattrsAt(const std::string& src, const std::string& dst) {
    char names[65536];
    ssize_t n = ::llistxattr(src.c_str(), names, sizeof names);
    if (n <= 0) return OkStatus();
    std::vector<char> val(65536);
    for (ssize_t i = 0; i < n; i += std::strlen(names + i) + 1) {
      const char* name = names + i;
      ssize_t v = ::lgetxattr(src.c_str(), name, val.data(), val.size());
      if (v < 0) continue;
      if (::lsetxattr(dst.c_str(), name, val.data(), v, 0) != 0 && errno != ENOTSUP && errno != EPERM)
        return ErrnoError(std::string("setxattr ") + name + " on " + dst);
    }
    return OkStatus();
  }

  Status SetMeta(const std::string& dst, const struct stat& st, bool is_link) {
    if (::lchown(dst.c_str(), st.st_uid, st.st_gid) != 0) return ErrnoError("chown " + dst);
    if (!is_link && ::chmod(dst.c_str(), st.st_mode & 07777) != 0) return ErrnoError("chmod " + dst);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    if (::utimensat(AT_FDCWD, dst.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError("utimes " + dst);
    return OkStatus();
  }

  Status CopyFile(const std::string& src, const std::string& dst, const struct stat& st) {
    if (st.st_nlink > 1) {
      auto it = links.find({st.st_dev, st.st_ino});
      if (it != links.end()) {
        if (::link(it->second.c_str(), dst.c_str()) != 0) return ErrnoError("link " + dst);
        return OkStatus();
      }
      links[{st.st_dev, st.st_ino}] = dst;
    }
    UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!in.valid()) return ErrnoError("open " + src);
    UniqueFd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out.valid()) return ErrnoError("create " + dst);
    off_t left = st.st_size;
    while (left > 0) {
      ssize_t n = ::copy_file_range(in.get(), nullptr, out.get(), nullptr, left, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EXDEV || errno == ENOSYS || errno == EINVAL) {
          // Fall back to read/write (different filesystems, old kernels).
          char buf[1 << 16];
          ssize_t r;
          while ((r = ::read(in.get(), buf, sizeof buf)) > 0)
            if (::write(out.get(), buf, r) != r) return ErrnoError("write " + dst);
          break;
        }
        return ErrnoError("copy " + src);
      }
      if (n == 0) break;
      left -= n;
    }
    stats.bytes += st.st_size;
    SBX_RETURN_IF_ERROR(CopyXattrs(in.get(), out.get(), dst));
    if (::fchown(out.get(), st.st_uid, st.st_gid) != 0) return ErrnoError("chown " + dst);
    // After chown (which clears set-id bits).
    if (::fchmod(out.get(), st.st_mode & 07777) != 0) return ErrnoError("chmod " + dst);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    if (::futimens(out.get(), ts) != 0) return ErrnoError("utimes " + dst);
    return OkStatus();
  }

  Status CopyDir(const std::string& src, const std::string& dst, const struct stat& dst_st) {
    if (::mkdir(dst.c_str(), 0700) != 0) return ErrnoError("mkdir " + dst);
    UniqueFd sfd(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!sfd.valid()) return ErrnoError("open " + src);
    DIR* d = ::fdopendir(::dup(sfd.get()));
    if (!d) return ErrnoError("opendir " + src);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names.emplace_back(e->d_name);
    }
    ::closedir(d);
    for (const auto& n : names) SBX_RETURN_IF_ERROR(CopyEntry(src + "/" + n, dst + "/" + n));
    UniqueFd dfd(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd.valid()) return ErrnoError("open " + dst);
    SBX_RETURN_IF_ERROR(CopyXattrs(sfd.get(), dfd.get(), dst));
    return SetMeta(dst, dst_st, false);
  }

  Status CopyEntry(const std::string& src, const std::string& dst) {
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0) return ErrnoError("stat " + src);
    ++stats.files;
    switch (st.st_mode & S_IFMT) {
      case S_IFREG:
        return CopyFile(src, dst, st);
      case S_IFDIR:
        return CopyDir(src, dst, st);
      case S_IFLNK: {
        char target[PATH_MAX + 1];
        ssize_t n = ::readlink(src.c_str(), target, PATH_MAX);
        if (n < 0) return ErrnoError("readlink " + src);
        target[n] = 0;
        if (::symlink(target, dst.c_str()) != 0) return ErrnoError("symlink " + dst);
        SBX_RETURN_IF_ERROR(CopyXattrsAt(src, dst));
        return SetMeta(dst, st, true);
      }
      case S_IFCHR:
      case S_IFBLK:
        // Only overlay whiteouts (0/0) are kept; a sandbox cannot make real devices.
        if (major(st.st_rdev) != 0 || minor(st.st_rdev) != 0) return OkStatus();
        [[fallthrough]];
      case S_IFIFO:
        if (::mknod(dst.c_str(), st.st_mode, st.st_rdev) != 0) return ErrnoError("mknod " + dst);
        SBX_RETURN_IF_ERROR(CopyXattrsAt(src, dst));
        return SetMeta(dst, st, false);
      default:
        return OkStatus();  // sockets have no content
    }
  }
};

}  // namespace

Result<CopyStats> CopyTree(const std::string& src, const std::string& dst) {
  Copier c;
  struct stat st;
  if (::lstat(src.c_str(), &st) != 0) return ErrnoError("stat " + src);
  if (!S_ISDIR(st.st_mode)) return MakeError(Code::kInvalidArgument, src + " is not a directory");
  SBX_RETURN_IF_ERROR(c.CopyDir(src, dst, st));
  return c.stats;
}

}  // namespace sbx::layers
