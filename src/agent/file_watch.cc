// The file service's "watch" op (files.h): inotify on a folder, and with "recursive" on
// every folder under it on the same filesystem, reported to sbxd as NDJSON events in kData
// frames until sbxd hangs up or the folder goes. Runs in a handler process on its only
// thread; the watches die with it.
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/file_paths.h"
#include "agent/files.h"
#include "agent/frame_io.h"

namespace sbx::agent {
namespace {

using nlohmann::json;

// Folders one watch may cover (each is an inotify watch, counted against the sandbox
// user's fs.inotify.max_user_watches).
constexpr size_t kMaxFolders = 8192;
// Through /proc/self/fd/N, a magic link that must be followed to the folder the fd holds
// (resolved in the sandbox's root by openat2, or opened with O_NOFOLLOW).
constexpr uint32_t kMask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                           IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;

class Watcher {
 public:
  Watcher(int ino, bool recursive, dev_t dev) : ino_(ino), recursive_(recursive), dev_(dev) {}

  // Watches the open folder `dfd` (sandbox path `path`) and, when recursive, the folders
  // under it; each entry found below is reported as created when `announce` (a folder that
  // appeared after the watch began may have been filled before its own watch existed).
  Status Add(int dfd, const std::string& path, bool announce, std::string* out) {
    if (by_wd_.size() >= kMaxFolders)
      return MakeError(Code::kResourceExhausted,
                       "a watch covers at most " + std::to_string(kMaxFolders) + " folders; " + path + " is not watched");
    int wd = inotify_add_watch(ino_, ("/proc/self/fd/" + std::to_string(dfd)).c_str(), kMask);
    if (wd < 0) return Errno(errno, "watch " + path);
    by_wd_[wd] = path;
    if (!recursive_ && !announce) return OkStatus();
    auto names = Names(dfd);
    if (!names.ok()) return OkStatus();  // it went meanwhile: its events say so
    for (const auto& name : *names) {
      struct stat st;
      if (fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      std::string child = Join(path, name);
      bool dir = S_ISDIR(st.st_mode);
      if (announce) Event(out, "create", child, dir);
      if (!dir || !recursive_ || st.st_dev != dev_) continue;
      UniqueFd sub(openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) continue;
      if (auto st2 = Add(sub.get(), child, announce, out); !st2.ok()) {
        if (announce) Event(out, "error", child, true, st2.error().message);
        else return st2;
      }
    }
    return OkStatus();
  }

  // Turns what read() returned into event lines; false once the watched folder is gone.
  // A rename's two halves may come in two reads: the first waits in moved_from_ until
  // Flush, after the queue was drained.
  bool Handle(const char* buf, ssize_t len, std::string* out) {
    auto& moved_from = moved_from_;
    for (const char* p = buf; p < buf + len;) {
      const auto* e = reinterpret_cast<const struct inotify_event*>(p);
      p += sizeof(struct inotify_event) + e->len;
      if (e->mask & IN_Q_OVERFLOW) {
        Event(out, "overflow", root_path(), true, "events were lost (the kernel's queue overflowed)");
        continue;
      }
      auto at = by_wd_.find(e->wd);
      if (at == by_wd_.end()) continue;
      if (e->mask & IN_IGNORED) {
        bool root = e->wd == root_wd_;
        by_wd_.erase(at);
        if (root) return false;
        continue;
      }
      if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        if (e->wd == root_wd_) {
          if (e->mask & IN_DELETE_SELF) Event(out, "remove", at->second, true);
          else Event(out, "rename", at->second, true, "", "");  // to: null, it left its own watch
          return false;
        }
        continue;  // the parent's event reports it
      }
      std::string path = Join(at->second, e->len ? std::string(e->name) : std::string());
      bool dir = e->mask & IN_ISDIR;
      if (e->mask & IN_CREATE) {
        Event(out, "create", path, dir);
        if (dir && recursive_) AddNew(at->second, e->name, path, out);
      } else if (e->mask & IN_MODIFY) {
        Event(out, "write", path, false);
      } else if (e->mask & IN_DELETE) {
        Event(out, "remove", path, dir);
      } else if (e->mask & IN_MOVED_FROM) {
        moved_from[e->cookie] = {path, dir};
      } else if (e->mask & IN_MOVED_TO) {
        auto from = moved_from.find(e->cookie);
        if (from == moved_from.end()) {  // moved in from outside the watch
          Event(out, "create", path, dir);
          if (dir && recursive_) AddNew(at->second, e->name, path, out);
          continue;
        }
        Event(out, "rename", from->second.first, dir, "", path);
        if (dir) Repath(from->second.first, path);
        moved_from.erase(from);
      }
    }
    return true;
  }

  // The renames whose other half never came: moved out of the watch.
  void Flush(std::string* out) {
    for (const auto& [cookie, what] : moved_from_) {
      Event(out, "rename", what.first, what.second, "", "");
      if (what.second) Forget(what.first);
    }
    moved_from_.clear();
  }

  // Writes are merged within one batch only: a file written again later is news again.
  void EndBatch() { last_.clear(); }
  void set_root(int wd) { root_wd_ = wd; }
  int first_wd() const { return by_wd_.empty() ? -1 : by_wd_.begin()->first; }
  const std::string& root_path() const { return by_wd_.count(root_wd_) ? by_wd_.at(root_wd_) : empty_; }

 private:
  // One line; a write right after the same write (a program writing in pieces) is one.
  void Event(std::string* out, const char* type, const std::string& path, bool dir, const std::string& message = "",
             const std::optional<std::string>& to = std::nullopt) {
    json e = {{"type", type}, {"path", path}, {"is_dir", dir}};
    if (to) e["to"] = to->empty() ? json(nullptr) : json(*to);
    if (!message.empty()) e["message"] = message;
    std::string line = e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    if (std::strcmp(type, "write") == 0 && line == last_) return;
    last_ = line;
    *out += line;
  }

  void AddNew(const std::string& parent, const char* name, const std::string& path, std::string* out) {
    auto pfd = OpenDir(parent_root_fd(), parent, O_PATH);
    if (!pfd.ok()) return;
    UniqueFd sub(openat(pfd->get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!sub.valid() || fstat(sub.get(), &st) != 0 || st.st_dev != dev_) return;
    if (auto s = Add(sub.get(), path, /*announce=*/true, out); !s.ok()) Event(out, "error", path, true, s.error().message);
  }

  // A folder renamed inside the watch: its watches keep going under the new name.
  void Repath(const std::string& from, const std::string& to) {
    for (auto& [wd, p] : by_wd_)
      if (p == from || p.rfind(from + "/", 0) == 0) p = to + p.substr(from.size());
  }

  // A folder moved out of the watch: its watches end.
  void Forget(const std::string& from) {
    for (auto it = by_wd_.begin(); it != by_wd_.end();) {
      if (it->first != root_wd_ && (it->second == from || it->second.rfind(from + "/", 0) == 0)) {
        inotify_rm_watch(ino_, it->first);
        it = by_wd_.erase(it);
      } else {
        ++it;
      }
    }
  }

  int parent_root_fd() const { return root_fd_; }

 public:
  int root_fd_ = -1;  // the sandbox's root, for resolving new folders' parents

 private:
  int ino_;
  bool recursive_;
  dev_t dev_;
  int root_wd_ = -1;
  std::map<int, std::string> by_wd_;
  std::map<uint32_t, std::pair<std::string, bool>> moved_from_;  // cookie -> (path, is_dir)
  std::string last_;
  const std::string empty_;
};

// Sends the event lines in kData frames of at most about kDataChunk, cut at line ends.
bool SendLines(int sock, const std::string& out) {
  size_t start = 0;
  while (start < out.size()) {
    size_t end = std::min(out.size(), start + kDataChunk);
    if (end < out.size()) {
      size_t nl = out.rfind('\n', end - 1);
      end = nl != std::string::npos && nl >= start ? nl + 1 : end;
    }
    if (!Send(sock, FrameType::kData, std::string_view(out).substr(start, end - start))) return false;
    start = end;
  }
  return true;
}

}  // namespace

void ServeWatch(int sock, const json& req, int root_fd) {
  std::string path = req.value("path", "");
  bool recursive = req.value("recursive", false);
  int64_t keepalive_ms = req.value("keepalive_ms", int64_t{15000});
  if (auto st = CheckPath(path, "path"); !st.ok()) return SendError(sock, st.error());
  auto dfd = OpenDir(root_fd, path, O_RDONLY);
  if (!dfd.ok()) return SendError(sock, dfd.error());
  struct stat st;
  if (fstat(dfd->get(), &st) != 0) return SendError(sock, Errno(errno, "watch " + path));
  UniqueFd ino(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!ino.valid()) return SendError(sock, Errno(errno, "inotify"));
  Watcher w(ino.get(), recursive, st.st_dev);
  w.root_fd_ = root_fd;
  std::string ignored;
  if (auto s = w.Add(dfd->get(), path, /*announce=*/false, &ignored); !s.ok()) return SendError(sock, s.error());
  w.set_root(w.first_wd());  // the first watch added is the folder itself (wds ascend)
  dfd->Reset();
  if (!SendJson(sock, {{"path", path}, {"recursive", recursive}})) return;
  alignas(struct inotify_event) char buf[64 * 1024];
  while (true) {
    struct pollfd fds[2] = {{ino.get(), POLLIN, 0}, {sock, POLLIN, 0}};
    int n = poll(fds, 2, static_cast<int>(keepalive_ms));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    if (n == 0) {  // quiet: a keep-alive, which also finds out whether sbxd is still there
      if (!Send(sock, FrameType::kData, "{\"type\":\"keepalive\"}\n")) return;
      continue;
    }
    if (fds[1].revents) return;  // sbxd hung up (it sends nothing else on a watch)
    std::string out;
    bool alive = true;
    ssize_t len;
    // At most about 1 MiB of events a batch: a sandbox that changes files without pause
    // gets its events sent as they come, not gathered without end.
    while (alive && out.size() < (1 << 20) && (len = read(ino.get(), buf, sizeof buf)) > 0)
      alive = w.Handle(buf, len, &out);
    w.Flush(&out);
    w.EndBatch();
    if (!SendLines(sock, out)) return;
    if (!alive) {
      Send(sock, FrameType::kDataEnd, "");
      return;
    }
  }
}

}  // namespace sbx::agent
