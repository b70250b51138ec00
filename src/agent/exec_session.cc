#include "agent/exec_session.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/frame_io.h"
#include "agent/spawn.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

// After the command's leader exits, output still arriving from descendants that hold the
// pipes is collected until the pipes close or stay quiet this long.
constexpr int kDrainQuietMs = 250;
constexpr size_t kOutBufferHigh = 4 << 20;  // stop reading pipes past this much unsent data

int64_t MonoUs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void SetNonBlock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// All processes below `root` (children, grandchildren...), from /proc.
std::vector<pid_t> Descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  DIR* d = opendir("/proc");
  if (!d) return {};
  while (struct dirent* e = readdir(d)) {
    char* end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    char* rp = strrchr(buf, ')');
    if (!rp) continue;
    int ppid = 0;
    char state;
    if (sscanf(rp + 2, "%c %d", &state, &ppid) != 2) continue;
    children[ppid].push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  std::vector<pid_t> out, stack = {root};
  while (!stack.empty()) {
    pid_t p = stack.back();
    stack.pop_back();
    auto it = children.find(p);
    if (it == children.end()) continue;
    for (pid_t c : it->second) {
      out.push_back(c);
      stack.push_back(c);
    }
  }
  return out;
}

// Kills every descendant of this process (which is a child subreaper, so orphans of the
// tree stay below it) until none is left, reaping them.
void KillTree() {
  for (int round = 0; round < 1000; ++round) {
    std::vector<pid_t> all = Descendants(getpid());
    for (pid_t p : all) kill(p, SIGKILL);
    int status;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
    if (all.empty()) {
      // Nothing visible; reap whatever is left and stop when there is no child.
      if (waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD) return;
    }
    if (round > 0) usleep(1000);
  }
}

struct Stream {
  int fd = -1;
  uint64_t sent = 0;
  uint64_t cap = 0;
  bool truncated = false;
  FrameType type;
};

}  // namespace

bool ExecSession::Flush() {
  while (!out_.empty()) {
    ssize_t n = send(sock_, out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      return false;
    }
    out_.erase(0, n);
  }
  return true;
}

void ExecSession::Run(const ExecRequest& req) {
  int64_t start_us = MonoUs();
  auto spawned = SpawnCommand(req);
  if (!spawned.ok()) {
    SendErrorMessage(sock_, spawned.error().message);
    return;
  }
  Spawned& sp = *spawned;
  const pid_t pid = sp.pid;
  if (req.report_pid && pid > 0) {
    std::string started = nlohmann::json{{"pid", pid}, {"cwd", sp.cwd}}.dump();
    Queue(FrameType::kResult, started.data(), started.size());
  }
  UniqueFd& master = sp.master;
  UniqueFd& stdin_w = sp.in;
  const std::string& exec_failure = sp.failure;
  Stream streams[2];
  streams[0] = {sp.out.Release(), 0, req.stdout_cap, false, FrameType::kStdout};
  streams[1] = {sp.err.Release(), 0, req.stderr_cap, false, FrameType::kStderr};
  SetNonBlock(sock_);

  // SIGCHLD through a signalfd (blocked in this process: the agent's main set the mask).
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  UniqueFd sfd(signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
  UniqueFd tfd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (req.timeout_ms > 0) {
    struct itimerspec its = {};
    its.it_value.tv_sec = req.timeout_ms / 1000;
    its.it_value.tv_nsec = (req.timeout_ms % 1000) * 1000000;
    timerfd_settime(tfd.get(), 0, &its, nullptr);
  }

  std::string stdin_buf;
  bool stdin_eof = false, peer_gone = false, timed_out = false, leader_done = pid < 0;
  int status = 0;
  int64_t end_us = 0;
  char buf[65536];
  int64_t last_sent_us = MonoUs();

  // Takes every whole frame that has arrived. The frames sent with the request (its stdin
  // and end of input, most often) may already sit in the decoder before the first poll.
  auto take_frames = [&] {
    while (true) {
      auto fr = in_->Next();
      if (!fr.ok()) {
        peer_gone = true;
        break;
      }
      if (!fr->has_value()) break;
      Frame& f = **fr;
      if (f.type == FrameType::kStdin && stdin_w.valid() && !stdin_eof) {
        stdin_buf += f.payload;
      } else if (f.type == FrameType::kStdinEof) {
        if (req.tty && stdin_w.valid()) stdin_buf += '\x04';  // a terminal's end of input
        else stdin_eof = true;
      } else if (f.type == FrameType::kResize && master.valid()) {
        ResizeTerminal(master.get(), f.payload);
      } else if (f.type == FrameType::kSignal) {
        auto j = nlohmann::json::parse(f.payload, nullptr, false);
        int sig = j.is_object() ? j.value("signal", 0) : 0;
        if (sig > 0 && sig < NSIG && pid > 0) kill(-pid, sig);
      }
    }
  };
  take_frames();
  auto open_streams = [&] { return (streams[0].fd >= 0) + (streams[1].fd >= 0); };
  while (true) {
    // Input with nothing left to write ends now (the command may be waiting for it).
    if (stdin_eof && stdin_buf.empty() && stdin_w.valid()) stdin_w.Reset();
    if (leader_done && open_streams() == 0) break;
    struct pollfd p[7];
    int n = 0;
    int i_sock = n;
    p[n++] = {sock_, static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)), 0};
    int i_s[2] = {-1, -1};
    if (out_.size() < kOutBufferHigh)
      for (int k = 0; k < 2; ++k)
        if (streams[k].fd >= 0) {
          i_s[k] = n;
          p[n++] = {streams[k].fd, POLLIN, 0};
        }
    int i_sig = n;
    p[n++] = {sfd.get(), POLLIN, 0};
    int i_tmr = n;
    p[n++] = {tfd.get(), POLLIN, 0};
    if (stdin_w.valid() && !stdin_buf.empty()) p[n++] = {stdin_w.get(), POLLOUT, 0};
    int64_t quiet_ms = (MonoUs() - last_sent_us) / 1000;
    int wait_ms = leader_done ? kDrainQuietMs
                              : static_cast<int>(std::max<int64_t>(0, req.keepalive_ms - quiet_ms));
    int rc = poll(p, n, wait_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (rc == 0 && leader_done) {
      // Descendants hold the pipes but are quiet: answer now; they keep running.
      break;
    }
    if (!leader_done && (MonoUs() - last_sent_us) / 1000 >= req.keepalive_ms) {
      Queue(FrameType::kKeepalive, "", 0);
      last_sent_us = MonoUs();
    }
    if (p[i_sock].revents & (POLLERR | POLLHUP)) peer_gone = true;
    if (p[i_sock].revents & POLLIN) {
      ssize_t got = read(sock_, buf, sizeof buf);
      if (got <= 0) {
        if (!(got < 0 && (errno == EAGAIN || errno == EINTR))) peer_gone = true;
      } else {
        in_->Feed(buf, got);
      }
    }
    take_frames();
    if (peer_gone) {
      // Nobody will read the answer: the exec is cancelled.
      KillTree();
      return;
    }
    if (stdin_w.valid() && !stdin_buf.empty()) {
      ssize_t w = write(stdin_w.get(), stdin_buf.data(), stdin_buf.size());
      if (w > 0) stdin_buf.erase(0, w);
      else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        stdin_buf.clear();
        stdin_w.Reset();
      }
    }
    if (stdin_eof && stdin_buf.empty() && stdin_w.valid()) stdin_w.Reset();
    for (int k = 0; k < 2; ++k) {
      if (i_s[k] < 0 || !(p[i_s[k]].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = streams[k];
      ssize_t got = read(s.fd, buf, sizeof buf);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        close(s.fd);
        s.fd = -1;
        continue;
      }
      uint64_t room = s.sent < s.cap ? s.cap - s.sent : 0;
      size_t take = static_cast<size_t>(std::min<uint64_t>(room, got));
      if (take > 0) {
        Queue(s.type, buf, take);
        last_sent_us = MonoUs();
      }
      s.sent += take;
      if (take < static_cast<size_t>(got)) s.truncated = true;
    }
    if (p[i_sig].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd.get(), &si, sizeof si) > 0) {
      }
      int st;
      pid_t r;
      while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
        if (r == pid) {
          status = st;
          leader_done = true;
          end_us = MonoUs();
        }
      }
    }
    if (p[i_tmr].revents & POLLIN) {
      timed_out = true;
      KillTree();
      if (!leader_done) {
        leader_done = true;
        end_us = MonoUs();
      }
      // Collect what is still in the pipes, then stop.
      for (auto& s : streams) {
        if (s.fd < 0) continue;
        ssize_t got;
        while ((got = read(s.fd, buf, sizeof buf)) > 0) {
          uint64_t room = s.sent < s.cap ? s.cap - s.sent : 0;
          size_t take = static_cast<size_t>(std::min<uint64_t>(room, got));
          if (take > 0) Queue(s.type, buf, take);
          s.sent += take;
          if (take < static_cast<size_t>(got)) s.truncated = true;
        }
        close(s.fd);
        s.fd = -1;
      }
    }
    if (!Flush()) {
      KillTree();
      return;
    }
  }
  for (auto& s : streams)
    if (s.fd >= 0) close(s.fd);
  if (!exec_failure.empty()) Queue(FrameType::kStderr, exec_failure.data(), exec_failure.size());

  ExitInfo info = ExitOf(status, pid > 0);
  info.timed_out = timed_out;
  info.stdout_truncated = streams[0].truncated;
  info.stderr_truncated = streams[1].truncated;
  info.execute_us = (end_us ? end_us : MonoUs()) - start_us;
  if (timed_out) {
    info.exit_code = 124;
    info.signal = 0;
  }
  std::string exit = info.ToJson();
  Queue(FrameType::kExit, exit.data(), exit.size());
  // Blocking from here: the answer must go out whole.
  int fl = fcntl(sock_, F_GETFL);
  fcntl(sock_, F_SETFL, fl & ~O_NONBLOCK);
  WriteAllBlocking(sock_, out_);
  out_.clear();
}

}  // namespace sbx::agent
