#include "agent/files.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/file_archive.h"
#include "agent/file_paths.h"
#include "agent/frame_io.h"
#include "agent/users.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

using nlohmann::json;

constexpr size_t kMaxListEntries = 10000;
constexpr int kMaxDepth = 64;

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
  std::string buf(kDataChunk, '\0');
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
  // A declared size (an upload's Content-Length) more than the disk holds, or has room
  // for, is refused before a byte of it comes.
  const uint64_t declared = req.value("size", uint64_t{0});
  if (max_bytes && declared > max_bytes)
    return SendError(sock, MakeError(Code::kTooLarge, "the file (" + std::to_string(declared) +
                                                          " bytes) is larger than the sandbox's disk (" +
                                                          std::to_string(max_bytes) + " bytes)"));
  struct statvfs vfs;
  if (declared && ::fstatvfs(pfd->get(), &vfs) == 0 &&
      declared > static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize)
    return SendError(sock, MakeError(Code::kTooLarge, "the file (" + std::to_string(declared) +
                                                          " bytes) is larger than the room left on the sandbox's disk (" +
                                                          std::to_string(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize) +
                                                          " bytes)"));
  std::string tmp = kUploadPrefix + RandomSuffix();
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

// `p` (absolute) without ".", ".." and doubled slashes, as Go's filepath.Clean makes it
// (so as envd does): the names an E2B client is answered with. Through a symlink,
// `/a/link/../x` cleaned is `/a/x`, not where the kernel would go; either way the path
// resolves inside the sandbox's root, as the user the call names.
std::string CleanPath(const std::string& p) {
  std::vector<std::string> parts;
  for (auto& part : Components(p)) {
    if (part != "..") parts.push_back(std::move(part));
    else if (!parts.empty()) parts.pop_back();
  }
  std::string out;
  for (const auto& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

// The request's "user" (a name or uid of the sandbox): this handler process takes that
// user's ids and groups for good before it touches a file, so the kernel checks every
// access as that user's and what it makes is that user's. With "home_relative", a path
// that is not absolute is taken from that user's home (root's without a user).
Status BecomeUser(json* req) {
  const std::string user = req->contains("user") ? (*req)["user"].get<std::string>() : "";
  const bool relative = req->value("home_relative", false);
  if (user.empty() && !relative) return OkStatus();
  SBX_ASSIGN_OR_RETURN(Identity id, LookUpUser(user.empty() ? "0" : user));
  if (relative) {
    for (const char* k : {"path", "from", "to"}) {
      if (!req->contains(k) || !(*req)[k].is_string()) continue;
      std::string p = (*req)[k];
      if (!p.empty() && p[0] != '/') p = Join(id.home, p);
      (*req)[k] = CleanPath(p);
    }
  }
  if (user.empty() || (id.uid == 0 && id.gid == 0)) return OkStatus();
  if (::setgroups(id.groups.size(), id.groups.data()) != 0 || ::setresgid(id.gid, id.gid, id.gid) != 0 ||
      ::setresuid(id.uid, id.uid, id.uid) != 0)
    return Errno(errno, "become user " + user);
  // A change of ids clears the parent-death signal, and may leave the process dumpable
  // (suid_dumpable): neither is wanted of a handler.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::prctl(PR_SET_DUMPABLE, 0);
  return OkStatus();
}

}  // namespace

void ServeFileOp(int sock, FrameDecoder* in, const std::string& request, int root_fd) {
  json req = json::parse(request, nullptr, false);
  if (!req.is_object() || !req.contains("op") || !req["op"].is_string())
    return SendError(sock, MakeError(Code::kInvalidArgument, "a file request needs an op"));
  std::string op = req["op"];
  try {
    if (Status st = BecomeUser(&req); !st.ok()) return SendError(sock, st.error());
    Result<json> r = MakeError(Code::kInvalidArgument, "unknown file op " + op);
    if (op == "read") return Read(sock, root_fd, req);
    if (op == "write") return Write(sock, in, root_fd, req);
    if (op == "archive_get") return ArchiveGet(sock, root_fd, req);
    if (op == "archive_put") return ArchivePut(sock, in, root_fd, req);
    if (op == "watch") return ServeWatch(sock, req, root_fd);
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

}  // namespace sbx::agent
