#include "base/reaper.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "base/unique_fd.h"

namespace sbx {
namespace {
std::mutex g_mu;
std::condition_variable g_cv;
std::map<pid_t, int> g_wanted;  // pid -> status, -1 while running
}  // namespace

Reaper& Reaper::Get() {
  static Reaper r;
  return r;
}

Status Reaper::Start() {
  if (started_) return OkStatus();
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return ErrnoError("PR_SET_CHILD_SUBREAPER");
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return ErrnoError("block SIGCHLD");
  started_ = true;
  std::thread([this] { Loop(); }).detach();
  return OkStatus();
}

void Reaper::Loop() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  while (true) {
    struct timespec ts = {1, 0};  // also sweep once a second, in case a signal merged
    sigtimedwait(&set, nullptr, &ts);
    while (true) {
      std::unique_lock<std::mutex> lock(g_mu);
      int status;
      pid_t p = ::waitpid(-1, &status, WNOHANG);
      if (p <= 0) break;
      auto it = g_wanted.find(p);
      if (it != g_wanted.end()) {
        it->second = status;
        g_cv.notify_all();
      }
    }
  }
}

namespace {

// In a forked child: keeps this process's capabilities across a change of effective uid
// and the exec that follows (as ambient ones), then takes `euid`. Raw system calls only.
bool BecomeOwner(uid_t euid) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  data[0].inheritable = data[0].permitted;
  data[1].inheritable = data[1].permitted;
  if (::syscall(SYS_capset, &hdr, data) != 0) return false;
  for (int cap = 0; cap < 64; ++cap)
    if (data[cap / 32].permitted & (1u << (cap % 32)))
      if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return false;
  // The real uid too: some tools (iptables, which CRIU runs) refuse to run when it differs.
  return ::syscall(SYS_setresuid, euid, euid, -1) == 0;
}

}  // namespace

Result<Reaper::RunResult> Reaper::Run(const std::vector<std::string>& argv, const std::string& cwd, uid_t euid,
                                      const std::function<Status(pid_t)>& before_exec, int64_t timeout_ms,
                                      const std::string& output_file, const RunUts& uts) {
  if (argv.empty()) return MakeError(Code::kInvalidArgument, "empty command");
  UniqueFd log;
  if (!output_file.empty()) {
    log.Reset(::open(output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!log.valid()) return ErrnoError("open " + output_file);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd rd(out[0]);
  int go[2] = {-1, -1};  // the child starts the command once it reads a byte here
  if (before_exec && ::pipe2(go, O_CLOEXEC) != 0) {
    ::close(out[1]);
    return ErrnoError("pipe");
  }
  UniqueFd go_r(go[0]), go_w(go[1]);
  pid_t pid;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    pid = ::fork();
    if (pid == 0) {
      // First, while every descriptor is where the caller left it (raw system calls).
      if (uts.join >= 0 && ::setns(uts.join, CLONE_NEWUTS) != 0) ::_exit(123);
      if (!uts.fresh_name.empty() &&
          (::unshare(CLONE_NEWUTS) != 0 || ::sethostname(uts.fresh_name.data(), uts.fresh_name.size()) != 0))
        ::_exit(123);
      int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::dup2(log.valid() ? log.get() : out[1], 1);
      ::dup2(log.valid() ? log.get() : out[1], 2);
      if (go[0] >= 0) {
        ::dup2(go[0], 3);
        go[0] = 3;
      }
      ::syscall(SYS_close_range, go[0] >= 0 ? 4 : 3, ~0U, 0);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      if (euid != 0 && !BecomeOwner(euid)) ::_exit(125);
      if (go[0] >= 0) {
        char c;
        if (::read(go[0], &c, 1) != 1) ::_exit(124);
        ::close(go[0]);
      }
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    if (pid > 0) g_wanted[pid] = -1;
  }
  ::close(out[1]);
  if (pid < 0) return ErrnoError("fork");
  go_r.Reset();
  Status prepared = OkStatus();
  if (before_exec) {
    prepared = before_exec(pid);
    if (!prepared.ok()) ::kill(pid, SIGKILL);
    else if (::write(go_w.get(), "g", 1) != 1) prepared = ErrnoError("start " + argv[0]);
    go_w.Reset();
  }
  RunResult res;
  char buf[4096];
  ssize_t n;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (timeout_ms > 0) {
      // Its output until the deadline; then it is killed (unless it already ended and was
      // reaped: its pid may be another's by now), and what it left is read for a second
      // more (something it started may hold the pipe open).
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        if (res.timed_out) break;
        res.timed_out = true;
        {
          std::lock_guard<std::mutex> lock(g_mu);
          if (g_wanted[pid] == -1) ::kill(pid, SIGKILL);
        }
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        continue;
      }
      struct pollfd p = {rd.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) continue;
    }
    n = ::read(rd.get(), buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (res.output.size() < 65536) res.output.append(buf, n);
  }
  int status;
  if (started_) {
    std::unique_lock<std::mutex> lock(g_mu);
    g_cv.wait(lock, [&] { return g_wanted[pid] != -1; });
    status = g_wanted[pid];
    g_wanted.erase(pid);
  } else {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::lock_guard<std::mutex> lock(g_mu);
    g_wanted.erase(pid);
  }
  if (!prepared.ok()) return prepared.error();
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

}  // namespace sbx
