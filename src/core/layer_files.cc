#include "core/layer_files.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>

#include "agent/users.h"
#include "base/unique_fd.h"

namespace sbx::core {

namespace {

// `rel` opened inside the layer `root` (its links resolved as in there); *err: the errno.
UniqueFd OpenIn(int root, const std::string& rel, int flags, int* err = nullptr) {
  struct open_how how = {};
  if (!(flags & O_PATH)) flags |= O_NOCTTY;  // openat2 takes no other flag with O_PATH
  how.flags = static_cast<uint64_t>(flags) | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  int fd = static_cast<int>(::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how));
  if (err) *err = fd < 0 ? errno : 0;
  return UniqueFd(fd);
}

// Whether a folder on the way to `rel` in the layer `root` is opaque (overlayfs's
// user.overlay.opaque: the sandbox removed and remade it), hiding the layers below there.
bool OpaqueOnTheWay(int root, const std::string& rel) {
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    UniqueFd dir = OpenIn(root, rel.substr(0, slash), O_RDONLY | O_DIRECTORY | O_NONBLOCK);
    if (!dir.valid()) return false;  // not in this layer, so nothing deeper is either
    char v[2] = {};
    if (::fgetxattr(dir.get(), "user.overlay.opaque", v, sizeof v) >= 1 && v[0] == 'y') return true;
  }
  return false;
}

// The top-most layer's entry at `rel`: its layer's root, the entry (O_PATH, not opened
// for reading) and its stat. `entry` is invalid when no layer has one.
struct Found {
  UniqueFd root, entry;
  struct stat st = {};
};

Found FindTopMost(const std::vector<std::string>& layers, const std::string& rel) {
  Found f;
  for (const auto& l : layers) {
    f.root = UniqueFd(::open(l.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!f.root.valid()) continue;
    int err = 0;
    f.entry = OpenIn(f.root.get(), rel, O_PATH, &err);
    if (f.entry.valid()) {
      if (::fstat(f.entry.get(), &f.st) != 0) f.entry.Reset();
      return f;
    }
    if (err != ENOENT) return f;  // unreadable, or an escape attempt: nothing
    if (OpaqueOnTheWay(f.root.get(), rel)) return f;  // removed in this layer
    // Not in this layer: the one below may hold it.
  }
  return f;
}

bool ValidUserName(const std::string& u) {
  if (u.size() > 32 || u.empty() || !(u[0] == '_' || (u[0] >= 'a' && u[0] <= 'z'))) return false;
  for (size_t i = 1; i < u.size(); ++i) {
    char c = u[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
              (c == '$' && i + 1 == u.size());
    if (!ok) return false;
  }
  return true;
}

bool IsUid(const std::string& u) {
  return !u.empty() && u.size() <= 10 && u.find_first_not_of("0123456789") == std::string::npos &&
         std::stoull(u) < 4294967295ULL;
}

}  // namespace

Result<std::string> ReadLayerFile(const std::vector<std::string>& layers, const std::string& rel, size_t max_bytes) {
  Found top = FindTopMost(layers, rel);
  const struct stat& st = top.st;
  if (!top.entry.valid() || !S_ISREG(st.st_mode)) return MakeError(Code::kNotFound, "no file " + rel + " in the layers");
  // Opened again for reading, without blocking, and checked to be the file just seen.
  UniqueFd f = OpenIn(top.root.get(), rel, O_RDONLY | O_NONBLOCK);
  struct stat st2;
  if (!f.valid() || ::fstat(f.get(), &st2) != 0 || !S_ISREG(st2.st_mode) || st2.st_ino != st.st_ino ||
      st2.st_dev != st.st_dev)
    return MakeError(Code::kNotFound, "no file " + rel + " in the layers");
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeError(Code::kInternal, "read " + rel + " of a layer: " + strerror(errno));
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes)
      return MakeError(Code::kInvalidArgument, rel + " of the image is over " + std::to_string(max_bytes) + " bytes");
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool LayerHasFile(const std::vector<std::string>& layers, const std::string& rel) {
  Found top = FindTopMost(layers, rel);
  return top.entry.valid() && S_ISREG(top.st.st_mode);
}

bool ValidUser(const std::string& u) { return u.empty() || IsUid(u) || ValidUserName(u); }

Result<std::string> SandboxUser(const std::vector<std::string>& layers, const std::string& asked) {
  if (asked == "root" || asked == "0") return std::string("root");
  if (IsUid(asked)) return asked;
  if (!ValidUser(asked))
    return MakeError(Code::kInvalidArgument, "invalid user \"" + asked.substr(0, 64) +
                                                 "\": a user name ([a-z_][a-z0-9_.-]{0,31}, $ at the end allowed) or a uid");
  auto passwd = ReadLayerFile(layers, "etc/passwd");
  // No default from a passwd that cannot be read (or is absurdly large): root.
  if (!passwd.ok() && asked.empty()) return std::string("root");
  if (!passwd.ok() && passwd.error().code != Code::kNotFound) return passwd.error();
  const std::string want = asked.empty() ? "user" : asked;
  bool found = passwd.ok() && agent::FindUser(want, *passwd, "").ok();
  if (asked.empty()) return std::string(found ? "user" : "root");
  if (!found) return MakeError(Code::kInvalidArgument, "user \"" + asked + "\" is not in the image's /etc/passwd");
  return asked;
}

}  // namespace sbx::core
