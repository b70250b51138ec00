#include "agent/process_keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "agent/frame_io.h"
#include "agent/spawn.h"
#include "base/proc.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

using nlohmann::json;

int g_serve_pid = 0;
// Output still arriving after the leader exited (from descendants holding the pipes) is
// kept until the pipes close or stay quiet this long, as an exec does.
constexpr int kDrainQuietMs = 250;
// While sbxd has this much unsent, the keeper stops reading the command's output (which
// then waits), as an exec does; with no sbxd attached it reads on into its ring.
constexpr size_t kPeerHigh = 4 << 20;
constexpr int kControlMs = 2000;  // a handler's request to a keeper, and its answer
constexpr size_t kMaxKeepers = 1024;  // asked by one list (sbxd keeps 64 per sandbox)

int64_t MonoUs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

int64_t WallMs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string KeeperPrefix() { return "sbx-proc/" + std::to_string(g_serve_pid) + "/"; }

socklen_t AbstractAddr(const std::string& name, sockaddr_un* a) {
  *a = {};
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), std::min(name.size(), sizeof a->sun_path - 1));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// True when the peer of `fd` runs as our user (root in a sandbox). That is the wall around
// keepers: another user in the sandbox cannot reach them. Root in the sandbox can, as it
// can reach the processes themselves (their /proc files, their pipes); the agent's
// processes are not dumpable, so their /proc/PID/exe cannot tell an agent handler apart.
bool PeerIsOurUser(int fd) {
  struct ucred cred = {};
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

// A connection to the keeper listening as `name`, checked to run as our user; invalid if
// there is none, or if its listen queue is full (a keeper accepts at once, so that is
// something else squatting the name: it is not waited for).
UniqueFd ConnectKeeper(const std::string& name) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return fd;
  sockaddr_un a;
  socklen_t alen = AbstractAddr(name, &a);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), alen) != 0 || !PeerIsOurUser(fd.get())) return UniqueFd();
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  struct timeval tv = {kControlMs / 1000, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

// One frame on a control connection (blocking, within its timeouts), with the fd that
// came with it, if any.
bool ReadControl(int fd, Frame* f, UniqueFd* passed) {
  FrameDecoder dec;
  char buf[4096];
  while (true) {
    auto next = dec.Next();
    if (!next.ok()) return false;
    if (next->has_value()) {
      *f = std::move(**next);
      return true;
    }
    if (dec.buffered() > sizeof buf) return false;  // control requests are small
    struct iovec iov = {buf, sizeof buf};
    alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
        int got;
        std::memcpy(&got, CMSG_DATA(c), sizeof got);
        passed->Reset(got);
      }
    dec.Feed(buf, n);
  }
}

struct Chunk {
  uint64_t seq;
  FrameType type;
  std::string data;
};

// The keeper of one command: its loop runs until the command ended and sbxd released it.
class Keeper {
 public:
  Keeper(const ExecRequest& req, size_t ring_cap, Spawned sp, UniqueFd listen)
      : req_(req), ring_cap_(ring_cap), sp_(std::move(sp)), listen_(std::move(listen)) {}

  void Run(int sock, FrameDecoder* in);

 private:
  json Info() const;
  void Queue(FrameType t, std::string_view data) {
    peer_out_ += EncodeHeader(t, static_cast<uint32_t>(data.size()));
    peer_out_.append(data);
  }
  void AddOutput(FrameType t, const char* data, size_t n);
  void Attach(UniqueFd fd, uint64_t since);
  void DropPeer();
  void TakePeerFrames();
  void Control(UniqueFd c);
  void End();

  ExecRequest req_;
  size_t ring_cap_;
  Spawned sp_;
  UniqueFd listen_, sfd_;
  int64_t started_ms_ = WallMs(), start_us_ = MonoUs(), end_us_ = 0;
  std::deque<Chunk> ring_;
  size_t ring_size_ = 0;
  uint64_t next_seq_ = 0;
  UniqueFd peer_;  // sbxd's connection while attached
  FrameDecoder peer_in_;
  std::string peer_out_;
  std::string stdin_buf_;
  bool stdin_eof_ = false, leader_done_ = false, ended_ = false, exit_sent_ = false, released_ = false;
  int status_ = 0;
};

json Keeper::Info() const {
  // The command as started, cut to 4 KiB in all (a long script must not make the list of
  // processes too large to answer).
  std::vector<std::string> argv;
  size_t room = 4096;
  bool cut = false;
  for (const auto& a : req_.argv) {
    if (a.size() > room) {
      argv.push_back(a.substr(0, room));
      cut = true;
      break;
    }
    argv.push_back(a);
    room -= a.size();
  }
  json j = {{"pid", sp_.pid},
            {"argv", argv},
            {"argv_cut", cut},
            {"cwd", sp_.cwd},
            {"user", req_.user},
            {"tty", req_.tty},
            {"started_ms", started_ms_},
            {"running", !ended_},
            {"stdin_open", sp_.in.valid() && !stdin_eof_},
            {"first_seq", ring_.empty() ? next_seq_ : ring_.front().seq},
            {"next_seq", next_seq_},
            {"exit", nullptr}};
  if (ended_) {
    ExitInfo e = ExitOf(status_, true);
    e.execute_us = end_us_ - start_us_;
    j["exit"] = json::parse(e.ToJson());
  }
  return j;
}

void Keeper::AddOutput(FrameType t, const char* data, size_t n) {
  ring_.push_back({next_seq_++, t, std::string(data, n)});
  ring_size_ += n;
  while (ring_size_ > ring_cap_ && ring_.size() > 1) {
    ring_size_ -= ring_.front().data.size();
    ring_.pop_front();
  }
  if (peer_.valid()) Queue(t, std::string_view(data, n));
}

void Keeper::Attach(UniqueFd fd, uint64_t since) {
  DropPeer();  // a newer sbxd connection replaces an older one
  peer_ = std::move(fd);
  fcntl(peer_.get(), F_SETFL, fcntl(peer_.get(), F_GETFL) | O_NONBLOCK);
  uint64_t first = ring_.empty() ? next_seq_ : ring_.front().seq;
  uint64_t from = std::clamp(since, first, next_seq_);
  json info = Info();
  info["from"] = from;
  Queue(FrameType::kResult, info.dump(-1, ' ', false, json::error_handler_t::replace));
  for (const Chunk& c : ring_)
    if (c.seq >= from) Queue(c.type, c.data);
}

void Keeper::DropPeer() {
  peer_.Reset();
  peer_in_ = FrameDecoder();
  peer_out_.clear();
  exit_sent_ = false;
}

void Keeper::TakePeerFrames() {
  while (peer_.valid()) {
    auto fr = peer_in_.Next();
    if (!fr.ok()) {
      DropPeer();
      return;
    }
    if (!fr->has_value()) return;
    Frame& f = **fr;
    if (f.type == FrameType::kStdin) {
      if (sp_.in.valid() && !stdin_eof_) stdin_buf_ += f.payload;
    } else if (f.type == FrameType::kStdinEof) {
      if (req_.tty && sp_.in.valid()) stdin_buf_ += '\x04';  // a terminal's end of input
      else stdin_eof_ = true;
    } else if (f.type == FrameType::kResize) {
      if (sp_.master.valid()) ResizeTerminal(sp_.master.get(), f.payload);
    } else if (f.type == FrameType::kSignal) {
      auto j = json::parse(f.payload, nullptr, false);
      int sig = j.is_object() && j["signal"].is_number_integer() ? j["signal"].get<int>() : 0;
      if (sig > 0 && sig < NSIG && !ended_) kill(-sp_.pid, sig);
    } else if (f.type == FrameType::kProcRelease) {
      if (ended_) released_ = true;
    }
  }
}

// One request from an agent handler on the keeper's listening socket.
void Keeper::Control(UniqueFd c) {
  if (!PeerIsOurUser(c.get())) return;
  struct timeval tv = {kControlMs / 1000, 0};
  setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  Frame f;
  UniqueFd passed;
  if (!ReadControl(c.get(), &f, &passed)) return;
  if (f.type == FrameType::kProcAttach && passed.valid()) {
    auto j = json::parse(f.payload, nullptr, false);
    uint64_t since = j.is_object() && j["since"].is_number_unsigned() ? j["since"].get<uint64_t>() : 0;
    Attach(std::move(passed), since);
  } else if (f.type == FrameType::kProcList) {
    SendJson(c.get(), Info());
  } else if (f.type == FrameType::kProcRelease) {
    // A new command got this pid: the old one ended long ago, and its name is wanted.
    if (ended_) released_ = true;
  }
}

void Keeper::End() {
  sp_.out.Reset();
  sp_.err.Reset();
  ended_ = true;
  if (!end_us_) end_us_ = MonoUs();
}

void Keeper::Run(int sock, FrameDecoder* in) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sfd_.Reset(signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
  peer_.Reset(sock);
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  peer_in_ = std::move(*in);
  json started = {{"pid", sp_.pid}, {"cwd", sp_.cwd}, {"from", 0}};
  Queue(FrameType::kResult, started.dump());
  char buf[65536];
  while (!released_) {
    TakePeerFrames();
    if (released_) break;
    if (stdin_eof_ && stdin_buf_.empty() && sp_.in.valid()) sp_.in.Reset();
    if (leader_done_ && !ended_ && !sp_.out.valid() && !sp_.err.valid()) End();
    if (ended_ && peer_.valid() && !exit_sent_) {
      json info = Info();
      Queue(FrameType::kExit, info["exit"].dump());
      exit_sent_ = true;
    }
    struct pollfd p[6];
    int n = 0;
    const int i_listen = n;
    p[n++] = {listen_.get(), POLLIN, 0};
    const int i_peer = peer_.valid() ? n : -1;
    if (peer_.valid()) p[n++] = {peer_.get(), static_cast<short>(POLLIN | (peer_out_.empty() ? 0 : POLLOUT)), 0};
    const int i_sig = n;
    p[n++] = {sfd_.get(), POLLIN, 0};
    const bool room = !peer_.valid() || peer_out_.size() < kPeerHigh;
    int i_out = -1, i_err = -1, i_in = -1;
    if (room && sp_.out.valid()) {
      i_out = n;
      p[n++] = {sp_.out.get(), POLLIN, 0};
    }
    if (room && sp_.err.valid()) {
      i_err = n;
      p[n++] = {sp_.err.get(), POLLIN, 0};
    }
    if (sp_.in.valid() && !stdin_buf_.empty()) {
      i_in = n;
      p[n++] = {sp_.in.get(), POLLOUT, 0};
    }
    int rc = poll(p, n, leader_done_ && !ended_ ? kDrainQuietMs : -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (rc == 0) {
      // Descendants hold the pipes but are quiet: the command has ended; they run on.
      End();
      continue;
    }
    if (p[i_listen].revents & POLLIN) {
      UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (c.valid()) Control(std::move(c));
    }
    if (i_peer >= 0 && peer_.valid() && (p[i_peer].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t got = read(peer_.get(), buf, sizeof buf);
      if (got > 0) peer_in_.Feed(buf, got);
      else if (got == 0 || (errno != EAGAIN && errno != EINTR)) DropPeer();  // sbxd went: keep running
    }
    for (auto [idx, fd, type] : {std::tuple{i_out, &sp_.out, FrameType::kStdout},
                                 std::tuple{i_err, &sp_.err, FrameType::kStderr}}) {
      if (idx < 0 || !(p[idx].revents & (POLLIN | POLLHUP | POLLERR)) || !fd->valid()) continue;
      ssize_t got = read(fd->get(), buf, sizeof buf);
      if (got > 0) AddOutput(type, buf, got);
      else if (got == 0 || (errno != EAGAIN && errno != EINTR)) fd->Reset();
    }
    if (p[i_sig].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd_.get(), &si, sizeof si) > 0) {
      }
      int st;
      pid_t r;
      while ((r = waitpid(-1, &st, WNOHANG)) > 0)
        if (r == sp_.pid) {
          status_ = st;
          leader_done_ = true;
          end_us_ = MonoUs();
        }
    }
    if (i_in >= 0 && sp_.in.valid() && !stdin_buf_.empty()) {
      ssize_t w = write(sp_.in.get(), stdin_buf_.data(), stdin_buf_.size());
      if (w > 0) {
        stdin_buf_.erase(0, w);
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        stdin_buf_.clear();
        sp_.in.Reset();
      }
    }
    while (peer_.valid() && !peer_out_.empty()) {
      ssize_t w = send(peer_.get(), peer_out_.data(), peer_out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        peer_out_.erase(0, w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else {
        if (w < 0 && errno != EAGAIN) DropPeer();
        break;
      }
    }
  }
}

// The names of the keepers listening now, from /proc/net/unix (listening sockets carry
// the flag __SO_ACCEPTCON, 00010000; accepted ones repeat the name without it).
std::vector<std::string> KeeperNames() {
  std::vector<std::string> out;
  std::ifstream f("/proc/net/unix");
  std::string line;
  const std::string prefix = "@" + KeeperPrefix();
  std::set<std::string> seen;
  std::getline(f, line);  // the header
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string num, refs, proto, flags, type, st, inode, path;
    if (!(ls >> num >> refs >> proto >> flags >> type >> st >> inode >> path)) continue;
    if (flags != "00010000" || path.rfind(prefix, 0) != 0) continue;
    if (seen.insert(path).second) out.push_back(path.substr(1));
  }
  return out;
}

}  // namespace

void SetKeeperScope(int serve_pid) { g_serve_pid = serve_pid; }

void ServeProcStart(int sock, FrameDecoder* in, const std::string& payload) {
  auto j = json::parse(payload, nullptr, false);
  if (!j.is_object() || !j.contains("exec") || !j["exec"].is_object()) {
    SendErrorMessage(sock, "a process start needs {\"exec\": {...}, \"ring_bytes\"}");
    return;
  }
  auto req = ExecRequest::FromJson(j["exec"].dump());
  if (!req.ok()) {
    SendErrorMessage(sock, req.error().message);
    return;
  }
  size_t ring = j["ring_bytes"].is_number_unsigned() ? j["ring_bytes"].get<size_t>() : size_t{1} << 20;
  ring = std::clamp<size_t>(ring, 64 << 10, 64 << 20);
  auto sp = SpawnCommand(*req);
  if (!sp.ok()) {
    SendErrorMessage(sock, sp.error().message);
    return;
  }
  if (sp->pid < 0) {
    // Told as an exec tells it: the reason on stderr, then exit 127.
    std::string exit = ExitOf(0, false).ToJson();
    WriteAllBlocking(sock, EncodeFrame(FrameType::kStderr, sp->failure) + EncodeFrame(FrameType::kExit, exit));
    return;
  }
  UniqueFd listen(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const std::string name = KeeperPrefix() + std::to_string(sp->pid);
  sockaddr_un a;
  socklen_t alen = AbstractAddr(name, &a);
  bool bound = false;
  for (int tries = 0; listen.valid() && tries < 50 && !bound; ++tries) {
    if (bind(listen.get(), reinterpret_cast<sockaddr*>(&a), alen) == 0 && ::listen(listen.get(), 16) == 0) {
      bound = true;
    } else if (errno == EADDRINUSE) {
      // The keeper of an ended command that had this pid, never released: it gives way.
      UniqueFd old = ConnectKeeper(name);
      if (old.valid()) Send(old.get(), FrameType::kProcRelease, "");
      usleep(10000);
    } else {
      break;
    }
  }
  if (!bound) {
    int err = errno;
    kill(-sp->pid, SIGKILL);
    SendError(sock, MakeError(Code::kUnavailable, std::string("cannot name the process's keeper (") + name +
                                                      "): " + strerror(err) + "; something in the sandbox may hold the name"));
    return;
  }
  Keeper(*req, ring, std::move(*sp), std::move(listen)).Run(sock, in);
}

void ServeProcAttach(int sock, const std::string& payload) {
  auto j = json::parse(payload, nullptr, false);
  if (!j.is_object() || !j["pid"].is_number_integer()) {
    SendErrorMessage(sock, "a process attach needs {\"pid\", \"since\"}");
    return;
  }
  int64_t pid = j["pid"].get<int64_t>();
  UniqueFd k = ConnectKeeper(KeeperPrefix() + std::to_string(pid));
  if (!k.valid()) {
    SendError(sock, MakeError(Code::kNotFound, "no background process " + std::to_string(pid) + " in the sandbox"));
    return;
  }
  // The request, with sbxd's connection itself: from now on the keeper answers on it.
  std::string frame = EncodeFrame(FrameType::kProcAttach, payload);
  if (proc::SendWithFd(k.get(), frame, sock) != static_cast<ssize_t>(frame.size()))
    SendError(sock, Errno(errno, "handing the connection to the process's keeper"));
}

void ServeProcList(int sock) {
  // Every keeper is asked at once and given one deadline together: a name that something
  // else squats and never answers on costs that deadline once, not once per name.
  struct Ask {
    UniqueFd fd;
    FrameDecoder dec;
  };
  std::vector<Ask> asks;
  std::vector<std::string> names = KeeperNames();
  bool complete = true;
  if (names.size() > kMaxKeepers) {
    names.resize(kMaxKeepers);
    complete = false;
  }
  for (const std::string& name : names) {
    UniqueFd k = ConnectKeeper(name);
    if (k.valid() && Send(k.get(), FrameType::kProcList, "")) asks.push_back({std::move(k), FrameDecoder()});
  }
  json list = json::array();
  size_t list_bytes = 0;
  const int64_t deadline = MonoUs() + int64_t{kControlMs} * 1000;
  size_t left = asks.size();
  char buf[4096];
  while (left > 0) {
    std::vector<struct pollfd> p;
    std::vector<Ask*> who;
    for (Ask& a : asks)
      if (a.fd.valid()) {
        p.push_back({a.fd.get(), POLLIN, 0});
        who.push_back(&a);
      }
    int64_t wait_ms = (deadline - MonoUs()) / 1000;
    if (wait_ms <= 0 || poll(p.data(), p.size(), static_cast<int>(wait_ms)) <= 0) break;
    for (size_t i = 0; i < p.size(); ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Ask& a = *who[i];
      ssize_t n = read(a.fd.get(), buf, sizeof buf);
      if (n > 0) a.dec.Feed(buf, n);
      auto f = a.dec.Next();
      bool whole = f.ok() && f->has_value();
      if (whole && (*f)->type == FrameType::kResult) {
        auto info = json::parse((*f)->payload, nullptr, false);
        // The answer must fit one frame: past that the list says it is incomplete.
        if (info.is_object() && list_bytes + (*f)->payload.size() < kMaxPayload / 2) {
          list_bytes += (*f)->payload.size();
          list.push_back(std::move(info));
        } else {
          complete = false;
        }
      }
      if (whole || n <= 0 || !f.ok() || a.dec.buffered() > (64 << 10)) {
        a.fd.Reset();
        --left;
      }
    }
  }
  // Keepers that did not answer in time are left out: the list is then incomplete too.
  if (left > 0) complete = false;
  SendJson(sock, {{"processes", std::move(list)}, {"complete", complete}});
}

}  // namespace sbx::agent
