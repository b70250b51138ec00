#include "agent/files.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/tar.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

using nlohmann::json;

constexpr size_t kChunk = 256 * 1024;
constexpr size_t kMaxListEntries = 10000;
constexpr int kMaxDepth = 64;
constexpr uint64_t kInRoot = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
constexpr uint64_t kBeneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;

const char* ApiCode(Code c) {
  switch (c) {
    case Code::kInvalidArgument: return "invalid_request";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition: return "conflict";
    case Code::kPermissionDenied: return "forbidden";
    case Code::kTooLarge: return "too_large";
    case Code::kUnavailable: return "unavailable";
    default: return "internal";
  }
}

// An errno as an API error about `what`.
Error Errno(int err, const std::string& what) {
  Code c = Code::kInternal;
  switch (err) {
    case ENOENT: c = Code::kNotFound; break;
    case EEXIST:
    case ENOTEMPTY:
    case EBUSY: c = Code::kFailedPrecondition; break;
    case EISDIR:
    case ENOTDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case EXDEV: c = Code::kInvalidArgument; break;
    case EACCES:
    case EPERM:
    case EROFS: c = Code::kPermissionDenied; break;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: c = Code::kTooLarge; break;
  }
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) msg = what + ": no space left on the sandbox's disk";
  if (err == EXDEV) msg = what + ": a move cannot cross file systems (mounts) inside the sandbox";
  Error e = MakeError(c, msg);
  e.sys_errno = err;
  return e;
}

bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    s.remove_prefix(n);
  }
  return true;
}

bool Send(int sock, FrameType t, std::string_view payload) {
  return SendAll(sock, EncodeHeader(t, static_cast<uint32_t>(payload.size()))) && SendAll(sock, payload);
}

bool SendJson(int sock, const json& j) {
  return Send(sock, FrameType::kResult, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void SendError(int sock, const Error& e) {
  json j = {{"message", e.message}, {"code", ApiCode(e.code)}};
  Send(sock, FrameType::kError, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

// The next frame from the client (blocking); false when it is gone or sent garbage.
bool NextFrame(int sock, FrameDecoder* in, Frame* f) {
  while (true) {
    auto next = in->Next();
    if (!next.ok()) return false;
    if (next->has_value()) {
      *f = std::move(**next);
      return true;
    }
    char buf[65536];
    ssize_t n = ::read(sock, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    in->Feed(buf, n);
  }
}

int Open2(int dirfd, const std::string& path, int flags, uint64_t resolve, mode_t mode = 0) {
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

// "/a/b/" -> ("/a", "b"). The last component must be a real name.
Result<std::pair<std::string, std::string>> SplitPath(std::string p, const char* what) {
  SBX_RETURN_IF_ERROR(CheckPath(p, what));
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  std::string base = p.substr(slash + 1);
  if (base.empty() || base == "." || base == "..")
    return MakeError(Code::kInvalidArgument, std::string(what) + " must name a file or folder, not " + (base.empty() ? "/" : base));
  return std::make_pair(slash == 0 ? std::string("/") : p.substr(0, slash), base);
}

Result<UniqueFd> OpenDir(int root, const std::string& path, int flags = O_PATH) {
  UniqueFd fd(Open2(root, path, flags | O_DIRECTORY, kInRoot));
  if (!fd.valid()) return Errno(errno, path);
  return fd;
}

// mkdir -p inside the root; each step resolved afresh in the root.
Status MkdirAll(int root, const std::string& path) {
  std::string so_far = "/";
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    std::string comp = path.substr(pos, next - pos);
    pos = next + 1;
    if (comp.empty() || comp == ".") continue;
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

std::string RandomSuffix() {
  unsigned char b[8];
  if (::getrandom(b, sizeof b, 0) != sizeof b) {
    uint64_t t = static_cast<uint64_t>(::getpid()) * 2654435761u ^ static_cast<uint64_t>(time(nullptr));
    std::memcpy(b, &t, sizeof b);
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

Result<json> Stat(int root, const json& req) {
  std::string path = req.value("path", "");
  SBX_RETURN_IF_ERROR(CheckPath(path, "path"));
  struct stat st;
  if (path.find_first_not_of('/') == std::string::npos) {
    if (::fstat(root, &st) != 0) return Errno(errno, path);
    return EntryJson("/", "/", st);
  }
  auto sp = SplitPath(path, "path");
  if (!sp.ok()) return sp.error();
  auto pfd = OpenDir(root, sp->first);
  if (!pfd.ok()) return pfd.error();
  if (::fstatat(pfd->get(), sp->second.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Errno(errno, path);
  json j = EntryJson(sp->second, Join(sp->first, sp->second), st);
  if (S_ISLNK(st.st_mode)) j["target"] = ReadLinkAt(pfd->get(), sp->second);
  return j;
}

// The names in the folder `dfd` (without "." and ".."), sorted.
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

// Lists `dfd` (shown as `shown`) into `out`, descending `depth - 1` more levels through real
// directories only (never through a symlink).
bool ListInto(int dfd, const std::string& shown, int depth, json& out) {
  auto names = Names(dfd);
  if (!names.ok()) return true;
  for (const auto& n : *names) {
    if (out.size() >= kMaxListEntries) return false;
    struct stat st;
    if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string p = Join(shown, n);
    json j = EntryJson(n, p, st);
    if (S_ISLNK(st.st_mode)) j["target"] = ReadLinkAt(dfd, n);
    out.push_back(std::move(j));
    if (S_ISDIR(st.st_mode) && depth > 1) {
      UniqueFd sub(::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.valid() && !ListInto(sub.get(), p, depth - 1, out)) return false;
    }
  }
  return true;
}

Result<json> List(int root, const json& req) {
  std::string path = req.value("path", "/");
  SBX_RETURN_IF_ERROR(CheckPath(path, "path"));
  int depth = req.value("depth", 1);
  if (depth < 1 || depth > kMaxDepth)
    return MakeError(Code::kInvalidArgument, "depth must be between 1 and " + std::to_string(kMaxDepth));
  auto dfd = OpenDir(root, path, O_RDONLY);
  if (!dfd.ok()) return dfd.error();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  json entries = json::array();
  bool whole = ListInto(dfd->get(), path, depth, entries);
  return json{{"path", path}, {"entries", std::move(entries)}, {"truncated", !whole}};
}

Result<json> Mkdir(int root, const json& req) {
  std::string path = req.value("path", "");
  auto sp = SplitPath(path, "path");
  if (!sp.ok()) return sp.error();
  bool parents = req.value("parents", true);
  auto pfd = OpenDir(root, sp->first);
  if (!pfd.ok()) {
    if (!parents || pfd.error().code != Code::kNotFound) return pfd.error();
    SBX_RETURN_IF_ERROR(MkdirAll(root, sp->first));
    pfd = OpenDir(root, sp->first);
    if (!pfd.ok()) return pfd.error();
  }
  if (::mkdirat(pfd->get(), sp->second.c_str(), 0755) == 0) return json{{"created", true}};
  int err = errno;
  struct stat st;
  if (err == EEXIST && parents && ::fstatat(pfd->get(), sp->second.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode))
    return json{{"created", false}};
  return Errno(err, "mkdir " + path);
}

Result<json> Move(int root, const json& req) {
  auto from = SplitPath(req.value("from", ""), "from");
  if (!from.ok()) return from.error();
  auto to = SplitPath(req.value("to", ""), "to");
  if (!to.ok()) return to.error();
  auto fp = OpenDir(root, from->first);
  if (!fp.ok()) return fp.error();
  auto tp = OpenDir(root, to->first);
  if (!tp.ok()) return tp.error();
  unsigned flags = req.value("overwrite", false) ? 0 : RENAME_NOREPLACE;
  if (::renameat2(fp->get(), from->second.c_str(), tp->get(), to->second.c_str(), flags) != 0)
    return Errno(errno, "move " + req.value("from", "") + " to " + req.value("to", ""));
  return json::object();
}

// Removes the directory `name` in `dfd` and everything below it, never following a link.
Status RemoveTree(int dfd, const std::string& name, const std::string& shown, int depth) {
  if (depth > 256) return MakeError(Code::kInvalidArgument, "remove " + shown + ": the tree is too deep");
  {
    UniqueFd sub(::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) return Errno(errno, "remove " + shown);
    auto names = Names(sub.get());
    if (!names.ok()) return Errno(names.error().sys_errno, "remove " + shown);
    for (const auto& n : *names) {
      if (::unlinkat(sub.get(), n.c_str(), 0) == 0 || errno == ENOENT) continue;
      if (errno != EISDIR) return Errno(errno, "remove " + Join(shown, n));
      SBX_RETURN_IF_ERROR(RemoveTree(sub.get(), n, Join(shown, n), depth + 1));
    }
  }
  if (::unlinkat(dfd, name.c_str(), AT_REMOVEDIR) != 0) return Errno(errno, "remove " + shown);
  return OkStatus();
}

Result<json> Remove(int root, const json& req) {
  std::string path = req.value("path", "");
  auto sp = SplitPath(path, "path");
  if (!sp.ok()) return sp.error();
  auto pfd = OpenDir(root, sp->first);
  if (!pfd.ok()) return pfd.error();
  const char* base = sp->second.c_str();
  if (::unlinkat(pfd->get(), base, 0) == 0) return json{{"removed", true}};
  if (errno != EISDIR) return Errno(errno, "remove " + path);
  if (req.value("recursive", false)) {
    SBX_RETURN_IF_ERROR(RemoveTree(pfd->get(), sp->second, path, 0));
    return json{{"removed", true}};
  }
  if (::unlinkat(pfd->get(), base, AT_REMOVEDIR) == 0) return json{{"removed", true}};
  if (errno == ENOTEMPTY || errno == EEXIST)
    return MakeError(Code::kFailedPrecondition, "remove " + path + ": the folder is not empty (recursive=true removes it all)");
  return Errno(errno, "remove " + path);
}

void Read(int sock, int root, const json& req) {
  std::string path = req.value("path", "");
  if (auto st = CheckPath(path, "path"); !st.ok()) return SendError(sock, st.error());
  // Non-blocking so that a fifo cannot hang the open; only regular files are read.
  UniqueFd fd(Open2(root, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, kInRoot));
  if (!fd.valid()) return SendError(sock, Errno(errno, path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return SendError(sock, Errno(errno, path));
  if (S_ISDIR(st.st_mode)) return SendError(sock, MakeError(Code::kInvalidArgument, path + " is a folder (use files/list or archive)"));
  if (!S_ISREG(st.st_mode)) return SendError(sock, MakeError(Code::kInvalidArgument, path + " is not a regular file"));
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  size_t slash = path.find_last_of('/');
  if (!SendJson(sock, EntryJson(path.substr(slash + 1), path, st))) return;
  std::string buf(kChunk, '\0');
  while (true) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SendError(sock, Errno(errno, "read " + path));
    if (n == 0) break;
    if (!Send(sock, FrameType::kData, std::string_view(buf.data(), n))) return;
  }
  Send(sock, FrameType::kDataEnd, "");
}

Result<uint32_t> ModeOf(const json& req, uint32_t dflt) {
  if (!req.contains("mode") || req["mode"].is_null()) return dflt;
  if (!req["mode"].is_number_integer()) return MakeError(Code::kInvalidArgument, "mode must be an integer");
  int64_t m = req["mode"].get<int64_t>();
  if (m < 0 || m > 07777) return MakeError(Code::kInvalidArgument, "mode must be between 0 and 07777");
  return static_cast<uint32_t>(m) & 0777;  // never setuid, setgid or sticky
}

void Write(int sock, FrameDecoder* in, int root, const json& req) {
  std::string path = req.value("path", "");
  auto sp = SplitPath(path, "path");
  if (!sp.ok()) return SendError(sock, sp.error());
  auto mode = ModeOf(req, 0644);
  if (!mode.ok()) return SendError(sock, mode.error());
  uint64_t max_bytes = req.value("max_bytes", uint64_t{0});
  bool parents = req.value("parents", true);
  if (parents)
    if (auto st = MkdirAll(root, sp->first); !st.ok()) return SendError(sock, st.error());
  auto pfd = OpenDir(root, sp->first);
  if (!pfd.ok()) return SendError(sock, pfd.error());
  const std::string& base = sp->second;
  struct stat st;
  if (::fstatat(pfd->get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    return SendError(sock, MakeError(Code::kInvalidArgument, path + " is a folder"));
  std::string tmp = ".sbx-upload-" + RandomSuffix();
  UniqueFd fd(::openat(pfd->get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return SendError(sock, Errno(errno, "create " + path));
  struct Cleanup {
    int dir;
    std::string name;
    bool armed = true;
    ~Cleanup() {
      if (armed) ::unlinkat(dir, name.c_str(), 0);
    }
  } cleanup{pfd->get(), tmp};
  if (!SendJson(sock, {{"ready", true}})) return;
  uint64_t size = 0;
  Frame f;
  while (true) {
    if (!NextFrame(sock, in, &f)) return;  // the client went away: no file
    if (f.type == FrameType::kDataEnd) break;
    if (f.type != FrameType::kData) return SendError(sock, MakeError(Code::kInvalidArgument, "expected data frames"));
    size += f.payload.size();
    if (max_bytes && size > max_bytes)
      return SendError(sock, MakeError(Code::kTooLarge, "the file is larger than the sandbox's disk (" + std::to_string(max_bytes) + " bytes)"));
    std::string_view rest = f.payload;
    while (!rest.empty()) {
      ssize_t n = ::write(fd.get(), rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return SendError(sock, Errno(errno, "write " + path));
      rest.remove_prefix(n);
    }
  }
  if (::fchmod(fd.get(), *mode) != 0) return SendError(sock, Errno(errno, "chmod " + path));
  if (::close(fd.Release()) != 0) return SendError(sock, Errno(errno, "write " + path));
  if (::renameat(pfd->get(), tmp.c_str(), pfd->get(), base.c_str()) != 0)
    return SendError(sock, Errno(errno, "write " + path));
  cleanup.armed = false;
  SendJson(sock, {{"size", size}, {"path", Join(sp->first, base)}});
}

// ---- archives ----

// Appends a folder's tree to a tar stream, sending full chunks as it goes.
class TarOut {
 public:
  explicit TarOut(int sock) : sock_(sock) {}
  bool Add(std::string_view s) {
    buf_.append(s);
    return buf_.size() < kChunk || Flush();
  }
  bool Flush() {
    if (buf_.empty()) return true;
    bool ok = Send(sock_, FrameType::kData, buf_);
    buf_.clear();
    return ok;
  }
  // Walks `dfd`; names in the archive start with `prefix` ("" or "a/b/").
  bool Walk(int dfd, const std::string& prefix, int depth) {
    if (depth > 256) return true;
    auto names = Names(dfd);
    if (!names.ok()) return true;
    for (const auto& n : *names) {
      struct stat st;
      if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      tar::Entry e;
      e.name = prefix + n;
      e.mode = st.st_mode & 07777;
      e.mtime = st.st_mtim.tv_sec;
      if (S_ISDIR(st.st_mode)) {
        e.type = tar::Type::kDir;
        e.name += "/";
        if (!Add(tar::WriteHeader(e))) return false;
        UniqueFd sub(::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.valid() && !Walk(sub.get(), e.name, depth + 1)) return false;
      } else if (S_ISLNK(st.st_mode)) {
        e.type = tar::Type::kSymlink;
        e.linkname = ReadLinkAt(dfd, n);
        if (!Add(tar::WriteHeader(e))) return false;
      } else if (S_ISREG(st.st_mode)) {
        UniqueFd fd(::openat(dfd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        e.type = tar::Type::kFile;
        e.size = st.st_size;
        if (!Add(tar::WriteHeader(e))) return false;
        // Exactly the size in the header: a file that shrinks meanwhile is padded with
        // zeros, one that grows is cut.
        uint64_t left = e.size;
        char buf[65536];
        while (left > 0) {
          ssize_t got = ::read(fd.get(), buf, std::min<uint64_t>(sizeof buf, left));
          if (got < 0 && errno == EINTR) continue;
          if (got <= 0) {
            std::string zeros(std::min<uint64_t>(sizeof buf, left), '\0');
            if (!Add(zeros)) return false;
            left -= zeros.size();
            continue;
          }
          if (!Add(std::string_view(buf, got))) return false;
          left -= got;
        }
        if (!Add(tar::Padding(e.size))) return false;
      }
      // Fifos, sockets and devices are left out.
    }
    return true;
  }

 private:
  int sock_;
  std::string buf_;
};

void ArchiveGet(int sock, int root, const json& req) {
  std::string path = req.value("path", "");
  if (auto st = CheckPath(path, "path"); !st.ok()) return SendError(sock, st.error());
  auto dfd = OpenDir(root, path, O_RDONLY);
  if (!dfd.ok()) return SendError(sock, dfd.error());
  if (!SendJson(sock, json::object())) return;
  TarOut out(sock);
  if (!out.Walk(dfd->get(), "", 0)) return;
  if (!out.Add(tar::EndOfArchive()) || !out.Flush()) return;
  Send(sock, FrameType::kDataEnd, "");
}

// A cleaned archive name: components without "." and empty ones. Refuses absolute names
// and any "..".
Result<std::vector<std::string>> CleanName(const std::string& name, const char* what) {
  if (name.empty() || name[0] == '/')
    return MakeError(Code::kInvalidArgument, std::string(what) + " '" + name + "' is absolute");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t next = name.find('/', pos);
    if (next == std::string::npos) next = name.size();
    std::string c = name.substr(pos, next - pos);
    pos = next + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return MakeError(Code::kInvalidArgument, std::string(what) + " '" + name + "' holds '..'");
    parts.push_back(c);
  }
  return parts;
}

std::string JoinParts(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? "/" : "") + parts[i];
  return s;
}

// Extracts entries under the destination folder. Every lookup is RESOLVE_BENEATH that
// folder: a link in the archive (or already there) cannot lead a later entry outside.
class Extractor : public tar::Sink {
 public:
  Extractor(int dest, uint64_t max_bytes) : dest_(dest), max_bytes_(max_bytes) {}
  uint64_t files = 0, bytes = 0;

  Status OnEntry(const tar::Entry& e) override {
    if (e.type == tar::Type::kOther)
      return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': devices, fifos and other special files are not allowed");
    auto parts = CleanName(e.name, "entry");
    if (!parts.ok()) return parts.error();
    if (parts->empty()) return OkStatus();  // "./" itself
    if (++files > 1000000) return MakeError(Code::kTooLarge, "the archive holds too many entries");
    std::string rel = JoinParts(*parts, parts->size());
    base_ = parts->back();
    std::string parent = JoinParts(*parts, parts->size() - 1);
    SBX_RETURN_IF_ERROR(MkdirBeneath(*parts, parts->size() - 1));
    parent_.Reset(Open2(dest_, parent, O_PATH | O_DIRECTORY, kBeneath));
    if (!parent_.valid()) return Errno(errno, "entry '" + e.name + "'");
    int pfd = parent_.get();
    const char* b = base_.c_str();
    name_ = e.name;
    switch (e.type) {
      case tar::Type::kDir: {
        if (::mkdirat(pfd, b, (e.mode & 0777) | 0700) != 0) {
          struct stat st;
          if (errno != EEXIST || ::fstatat(pfd, b, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            return Errno(errno == EEXIST ? EEXIST : errno, "entry '" + e.name + "'");
        }
        return OkStatus();
      }
      case tar::Type::kFile: {
        if (max_bytes_ && bytes + e.size > max_bytes_)
          return MakeError(Code::kTooLarge, "the archive expands past the sandbox's disk (" + std::to_string(max_bytes_) + " bytes)");
        SBX_RETURN_IF_ERROR(Replace(pfd, b, e.name));
        file_.Reset(::openat(pfd, b, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!file_.valid()) return Errno(errno, "entry '" + e.name + "'");
        mode_ = e.mode & 0777;
        mtime_ = e.mtime;
        return OkStatus();
      }
      case tar::Type::kSymlink: {
        // The target must stay inside the destination, read from the link's folder.
        if (e.linkname.empty() || e.linkname[0] == '/')
          return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': a link may not point to an absolute path");
        int level = static_cast<int>(parts->size()) - 1;
        size_t pos = 0;
        while (pos <= e.linkname.size()) {
          size_t next = e.linkname.find('/', pos);
          if (next == std::string::npos) next = e.linkname.size();
          std::string c = e.linkname.substr(pos, next - pos);
          pos = next + 1;
          if (c == "..") --level;
          else if (!c.empty() && c != ".") ++level;
          if (level < 0) return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': a link may not point outside the folder");
        }
        SBX_RETURN_IF_ERROR(Replace(pfd, b, e.name));
        if (::symlinkat(e.linkname.c_str(), pfd, b) != 0) return Errno(errno, "entry '" + e.name + "'");
        return OkStatus();
      }
      case tar::Type::kHardlink: {
        auto target = CleanName(e.linkname, "link target");
        if (!target.ok()) return target.error();
        if (target->empty()) return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': bad link target");
        UniqueFd tp(Open2(dest_, JoinParts(*target, target->size() - 1), O_PATH | O_DIRECTORY, kBeneath));
        if (!tp.valid()) return Errno(errno, "entry '" + e.name + "' (link target)");
        SBX_RETURN_IF_ERROR(Replace(pfd, b, e.name));
        if (::linkat(tp.get(), target->back().c_str(), pfd, b, 0) != 0)
          return Errno(errno, "entry '" + e.name + "' (link to " + e.linkname + ")");
        return OkStatus();
      }
      case tar::Type::kOther:
        break;
    }
    return OkStatus();
  }
  Status OnData(std::string_view chunk) override {
    if (!file_.valid()) return OkStatus();
    bytes += chunk.size();
    while (!chunk.empty()) {
      ssize_t n = ::write(file_.get(), chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno(errno, "entry '" + name_ + "'");
      chunk.remove_prefix(n);
    }
    return OkStatus();
  }
  Status OnEntryEnd() override {
    if (!file_.valid()) return OkStatus();
    ::fchmod(file_.get(), mode_);
    struct timespec ts[2] = {{mtime_, 0}, {mtime_, 0}};
    ::futimens(file_.get(), ts);
    file_.Reset();
    return OkStatus();
  }

 private:
  // Removes a non-folder already at `b` (a file, or a link that must not be written through).
  Status Replace(int pfd, const char* b, const std::string& name) {
    if (::unlinkat(pfd, b, 0) == 0 || errno == ENOENT) return OkStatus();
    return Errno(errno, "entry '" + name + "'");
  }
  Status MkdirBeneath(const std::vector<std::string>& parts, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      UniqueFd p(Open2(dest_, JoinParts(parts, i), O_PATH | O_DIRECTORY, kBeneath));
      if (!p.valid()) return Errno(errno, "folder '" + JoinParts(parts, i) + "'");
      if (::mkdirat(p.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST)
        return Errno(errno, "folder '" + JoinParts(parts, i + 1) + "'");
    }
    return OkStatus();
  }
  int dest_;
  uint64_t max_bytes_;
  UniqueFd parent_, file_;
  std::string base_, name_;
  uint32_t mode_ = 0644;
  int64_t mtime_ = 0;
};

void ArchivePut(int sock, FrameDecoder* in, int root, const json& req) {
  std::string path = req.value("path", "");
  if (auto st = CheckPath(path, "path"); !st.ok()) return SendError(sock, st.error());
  uint64_t max_bytes = req.value("max_bytes", uint64_t{0});
  if (auto st = MkdirAll(root, path); !st.ok()) return SendError(sock, st.error());
  auto dfd = OpenDir(root, path);
  if (!dfd.ok()) return SendError(sock, dfd.error());
  if (!SendJson(sock, {{"ready", true}})) return;
  Extractor x(dfd->get(), max_bytes);
  tar::Reader reader(&x);
  // A gzip stream is inflated on the way; what it may expand to is bounded.
  const uint64_t max_tar = (max_bytes ? max_bytes : (uint64_t{64} << 30)) + (uint64_t{64} << 20);
  uint64_t tar_bytes = 0;
  bool first = true, gzip = false;
  z_stream zs = {};
  struct ZEnd {
    z_stream* z;
    bool* on;
    ~ZEnd() {
      if (*on) inflateEnd(z);
    }
  } zend{&zs, &gzip};
  std::string out(kChunk, '\0');
  Status st = OkStatus();
  auto feed = [&](std::string_view s) -> Status {
    tar_bytes += s.size();
    if (tar_bytes > max_tar) return MakeError(Code::kTooLarge, "the archive expands past its limit");
    return reader.Feed(s);
  };
  Frame f;
  while (true) {
    if (!NextFrame(sock, in, &f)) return;
    if (f.type == FrameType::kDataEnd) break;
    if (f.type != FrameType::kData) return SendError(sock, MakeError(Code::kInvalidArgument, "expected data frames"));
    if (!st.ok()) continue;  // drain what the client still sends, then answer
    if (first && !f.payload.empty()) {
      first = false;
      if (f.payload.size() >= 2 && static_cast<unsigned char>(f.payload[0]) == 0x1f &&
          static_cast<unsigned char>(f.payload[1]) == 0x8b) {
        if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return SendError(sock, MakeError(Code::kInternal, "inflateInit failed"));
        gzip = true;
      }
    }
    if (!gzip) {
      st = feed(f.payload);
      continue;
    }
    zs.next_in = reinterpret_cast<Bytef*>(f.payload.data());
    zs.avail_in = static_cast<uInt>(f.payload.size());
    while (st.ok() && zs.avail_in > 0) {
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      int rc = inflate(&zs, Z_NO_FLUSH);
      size_t got = out.size() - zs.avail_out;
      if (got) st = feed(std::string_view(out.data(), got));
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK && rc != Z_BUF_ERROR) st = MakeError(Code::kInvalidArgument, "the gzip stream is corrupt");
      if (rc == Z_BUF_ERROR) break;
    }
  }
  if (st.ok()) st = reader.Finish();
  if (!st.ok()) return SendError(sock, st.error());
  SendJson(sock, {{"files", x.files}, {"bytes", x.bytes}});
}

}  // namespace

void ServeFileOp(int sock, FrameDecoder* in, const std::string& request, int root_fd) {
  json req = json::parse(request, nullptr, false);
  if (!req.is_object() || !req.contains("op") || !req["op"].is_string())
    return SendError(sock, MakeError(Code::kInvalidArgument, "a file request needs an op"));
  std::string op = req["op"];
  try {
    Result<json> r = MakeError(Code::kInvalidArgument, "unknown file op " + op);
    if (op == "read") return Read(sock, root_fd, req);
    if (op == "write") return Write(sock, in, root_fd, req);
    if (op == "archive_get") return ArchiveGet(sock, root_fd, req);
    if (op == "archive_put") return ArchivePut(sock, in, root_fd, req);
    if (op == "stat") r = Stat(root_fd, req);
    else if (op == "list") r = List(root_fd, req);
    else if (op == "mkdir") r = Mkdir(root_fd, req);
    else if (op == "move") r = Move(root_fd, req);
    else if (op == "remove") r = Remove(root_fd, req);
    if (!r.ok()) return SendError(sock, r.error());
    SendJson(sock, *r);
  } catch (const std::exception& e) {
    // A field of the wrong JSON type.
    SendError(sock, MakeError(Code::kInvalidArgument, std::string("bad file request: ") + e.what()));
  }
}

void ServePortOpen(int sock, FrameDecoder* in, const std::string& request) {
  json req = json::parse(request, nullptr, false);
  int port = req.is_object() && req.contains("port") && req["port"].is_number_integer() ? req["port"].get<int>() : 0;
  if (port < 1 || port > 65535) return SendError(sock, MakeError(Code::kInvalidArgument, "port must be between 1 and 65535"));
  UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!tcp.valid()) return SendError(sock, Errno(errno, "socket"));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc;
  do {
    rc = ::connect(tcp.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    return SendError(sock, MakeError(Code::kUnavailable, "nothing answers on port " + std::to_string(port) +
                                                             " in the sandbox: " + std::strerror(err)));
  }
  if (!SendJson(sock, {{"port", port}})) return;
  // Raw bytes from here. Anything the client sent early is already decoded as frames: it
  // must wait for the answer, so there is nothing.
  (void)in;
  int fds[2] = {sock, tcp.get()};
  bool open_in[2] = {true, true};  // still reading from fds[i]
  std::string pending[2];           // read from fds[i], to write to fds[1-i]
  char buf[65536];
  while (open_in[0] || open_in[1] || !pending[0].empty() || !pending[1].empty()) {
    struct pollfd p[2];
    for (int i = 0; i < 2; ++i) {
      short ev = 0;
      if (open_in[i] && pending[i].size() < sizeof buf) ev |= POLLIN;
      if (!pending[1 - i].empty()) ev |= POLLOUT;
      p[i] = {ev ? fds[i] : -1, ev, 0};  // nothing to wait for on it: not polled
    }
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0) continue;
      if ((p[i].events & POLLIN) && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = ::read(fds[i], buf, sizeof buf);
        if (n > 0) {
          pending[i].append(buf, n);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          open_in[i] = false;
          if (pending[i].empty()) ::shutdown(fds[1 - i], SHUT_WR);
        }
      }
      if ((p[i].events & POLLOUT) && (p[i].revents & (POLLOUT | POLLHUP | POLLERR))) {
        ssize_t n = ::send(fds[i], pending[1 - i].data(), pending[1 - i].size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          pending[1 - i].erase(0, n);
          if (pending[1 - i].empty() && !open_in[1 - i]) ::shutdown(fds[i], SHUT_WR);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          return;  // that side is gone
        }
      }
    }
  }
}

}  // namespace sbx::agent
