#include "base/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>

#include "base/unique_fd.h"

namespace sbx::fs {

namespace {

Result<std::string> ReadAll(UniqueFd fd, const std::string& path, size_t max_bytes) {
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + path);
    }
    if (n == 0) break;
    out.append(buf, n);
    if (out.size() > max_bytes) return MakeError(Code::kTooLarge, path + " is too large");
  }
  return out;
}

}  // namespace

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + path);
  return ReadAll(std::move(fd), path, max_bytes);
}

Result<std::string> ReadOwnedFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return ErrnoError("open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISREG(st.st_mode)) return MakeError(Code::kPermissionDenied, path + " is not a regular file");
  return ReadAll(std::move(fd), path, max_bytes);
}

namespace {
Status WriteAll(int fd, const std::string& data, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + what);
    }
    off += n;
  }
  return OkStatus();
}
}  // namespace

Status WriteFile(const std::string& path, const std::string& data, bool create, mode_t mode) {
  int flags = O_WRONLY | O_CLOEXEC | O_TRUNC | (create ? O_CREAT : 0);
  UniqueFd fd(::open(path.c_str(), flags, mode));
  if (!fd.valid()) return ErrnoError("open " + path);
  return WriteAll(fd.get(), data, path);
}

Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode) {
  std::string tmp = path + ".tmp";
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
    if (!fd.valid()) return ErrnoError("open " + tmp);
    SBX_RETURN_IF_ERROR(WriteAll(fd.get(), data, tmp));
    if (::fsync(fd.get()) != 0) return ErrnoError("fsync " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename " + tmp);
  return OkStatus();
}

Status MkdirAll(const std::string& path, mode_t mode) {
  if (path.empty()) return OkStatus();
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST)
      return ErrnoError("mkdir " + cur);
    i = j + 1;
  }
  if (!IsDir(path)) return MakeError(Code::kFailedPrecondition, path + " is not a directory");
  return OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

namespace {
int RemoveOne(const char* p, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_DP || type == FTW_D) {
    if (::rmdir(p) != 0 && errno != ENOENT) return -1;
  } else {
    if (::unlink(p) != 0 && errno != ENOENT) return -1;
  }
  return 0;
}

// nftw has no user data argument; the delta is process-global but ShiftOwnership
// serializes on it.
std::atomic<uid_t> g_shift{0};
int ShiftOne(const char* p, const struct stat* st, int, struct FTW*) {
  uid_t d = g_shift.load();
  uid_t u = st->st_uid < d ? st->st_uid + d : st->st_uid;
  gid_t g = st->st_gid < d ? st->st_gid + d : st->st_gid;
  if (u == st->st_uid && g == st->st_gid) return 0;
  if (::lchown(p, u, g) != 0) return -1;
  // chown clears setuid/setgid bits on regular files; put them back (they only
  // matter inside the sandbox's user namespace, where no_new_privs disarms them).
  if (!S_ISLNK(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)))
    ::chmod(p, st->st_mode & 07777);
  return 0;
}
}  // namespace

Status RemoveTree(const std::string& path) {
  if (!Exists(path)) return OkStatus();
  if (::nftw(path.c_str(), RemoveOne, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0)
    return ErrnoError("remove " + path);
  return OkStatus();
}

Status ShiftOwnership(const std::string& path, uid_t delta) {
  static std::atomic_flag busy = ATOMIC_FLAG_INIT;
  while (busy.test_and_set()) {
  }
  g_shift = delta;
  int rc = ::nftw(path.c_str(), ShiftOne, 64, FTW_PHYS | FTW_MOUNT);
  int err = errno;
  busy.clear();
  if (rc != 0) return ErrnoError("chown under " + path, err);
  return OkStatus();
}

bool IsMountPoint(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT ...
    size_t pos = 0;
    for (int i = 0; i < 4 && pos != std::string::npos; ++i) pos = line.find(' ', pos + 1);
    if (pos == std::string::npos) continue;
    size_t end = line.find(' ', pos + 1);
    if (line.compare(pos + 1, end - pos - 1, path) == 0) return true;
  }
  return false;
}

Result<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return ErrnoError("opendir " + path);
  std::vector<std::string> out;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    out.emplace_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

namespace {
std::atomic<uint64_t> g_size{0};
int SizeOne(const char*, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_F && S_ISREG(st->st_mode)) g_size += static_cast<uint64_t>(st->st_blocks) * 512;
  return 0;
}
}  // namespace

uint64_t TreeSize(const std::string& path) {
  static std::atomic_flag busy = ATOMIC_FLAG_INIT;
  while (busy.test_and_set()) {
  }
  g_size = 0;
  ::nftw(path.c_str(), SizeOne, 64, FTW_PHYS | FTW_MOUNT);
  uint64_t v = g_size.load();
  busy.clear();
  return v;
}

namespace {

bool ZeroPage(const char* p) {
  uint64_t acc = 0;
  for (size_t i = 0; i < 4096; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    acc |= w;
  }
  return acc == 0;
}

// Writes `n` bytes of `buf` at `at`; with `skip_zero`, runs of whole zero pages are not
// written (aligned at 4 KiB from `at`, which is page-aligned). Returns the bytes written.
Result<uint64_t> WriteAt(int out, const char* buf, size_t n, off_t at, bool skip_zero) {
  uint64_t written = 0;
  for (size_t i = 0; i < n;) {
    size_t len = n - i;
    if (skip_zero) {
      if (len >= 4096 && ZeroPage(buf + i)) {
        i += 4096;
        continue;
      }
      len = std::min<size_t>(len, 4096);
    }
    for (size_t w = 0; w < len;) {
      ssize_t k = ::pwrite(out, buf + i + w, len - w, at + static_cast<off_t>(i + w));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return ErrnoError("write the copy");
      w += static_cast<size_t>(k);
    }
    written += len;
    i += len;
  }
  return written;
}

}  // namespace

Result<uint64_t> CopyData(int in, int out, uint64_t size, bool skip_zero_pages) {
  const off_t end = static_cast<off_t>(size);
  uint64_t copied = 0;
  std::vector<char> buf;
  if (skip_zero_pages) buf.resize(1 << 20);
  for (off_t at = 0; at < end;) {
    off_t data = ::lseek(in, at, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    if (data < 0) return ErrnoError("seek the data to copy");
    if (data >= end) break;
    off_t hole = ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) return ErrnoError("seek the data to copy");
    if (hole > end) hole = end;
    for (off_t off_in = data, off_out = data; off_in < hole;) {
      size_t want = static_cast<size_t>(hole - off_in);
      // In the kernel where it can; between file systems of different kinds (a memfd and
      // a disk's) it cannot, and the bytes come through here.
      ssize_t n = buf.empty() ? ::copy_file_range(in, &off_in, out, &off_out, want, 0) : -1;
      if (n < 0 && buf.empty() && errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS)
        return ErrnoError("copy");
      if (n < 0) {
        if (buf.empty()) buf.resize(1 << 20);
        n = ::pread(in, buf.data(), std::min(want, buf.size()), off_in);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? ErrnoError("read the data to copy") : MakeError(Code::kInternal, "the data to copy ended early");
        SBX_ASSIGN_OR_RETURN(uint64_t w, WriteAt(out, buf.data(), static_cast<size_t>(n), off_out, skip_zero_pages));
        off_in += n;
        off_out += n;
        copied += w;
      } else if (n == 0) {
        return MakeError(Code::kInternal, "the data to copy ended early");
      } else {
        copied += static_cast<uint64_t>(n);
      }
    }
    at = hole;
  }
  return copied;
}

}  // namespace sbx::fs
