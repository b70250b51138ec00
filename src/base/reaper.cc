#include "base/reaper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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

Result<Reaper::RunResult> Reaper::Run(const std::vector<std::string>& argv, const std::string& cwd) {
  if (argv.empty()) return MakeError(Code::kInvalidArgument, "empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd rd(out[0]);
  pid_t pid;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    pid = ::fork();
    if (pid == 0) {
      int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::syscall(SYS_close_range, 3, ~0U, 0);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
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
  RunResult res;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(rd.get(), buf, sizeof buf)) != 0) {
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
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

}  // namespace sbx
