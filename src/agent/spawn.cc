#include "agent/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "agent/self_env.h"
#include "agent/users.h"

namespace sbx::agent {
namespace {

void SetNonBlock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Finds `name` on PATH (from the request's env) unless it holds a '/'.
std::string Resolve(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string_view path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) path = std::string_view(e).substr(5);
  char cand[4096];
  while (true) {
    size_t colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    if (dir.empty()) dir = ".";
    if (dir.size() + name.size() + 2 <= sizeof cand) {
      std::memcpy(cand, dir.data(), dir.size());
      cand[dir.size()] = '/';
      std::memcpy(cand + dir.size() + 1, name.c_str(), name.size() + 1);
      struct stat st;
      if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) return cand;
    }
    if (colon == std::string_view::npos) break;
    path = path.substr(colon + 1);
  }
  return "";
}

// What ForkAs's child reports when it fails before its exec: which step, and errno.
struct ChildFailure {
  char step;  // 'c': chdir, 'e': exec, 'u': the user's ids, 's': its stdio
  int err;
};

// fork, then in the child only async-signal-safe calls: what posix_spawn does for root
// (a new session, default signals, stdio), then the user's groups, gid and uid (which
// drops every capability), its working directory and the exec. A failure before the exec
// comes back through a close-on-exec pipe. Returns the pid, or -1 with *failure set.
// `cwd_is_default`: the home was chosen, not asked for; if the user cannot enter it, /
// (the child says so through the pipe, a '/' before the exec: *fell_back).
pid_t ForkAs(const Identity& id, const char* path, char* const* argv, char* const* envp, const char* cwd,
             bool cwd_is_default, const std::string& slave, int in, int out, int err, ChildFailure* failure,
             bool* fell_back) {
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    *failure = {'e', errno};
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    ::close(report[0]);
    sigset_t none;
    sigemptyset(&none);
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setsid();
    if (!slave.empty()) {
      int t = ::open(slave.c_str(), O_RDWR);  // after setsid: the session's controlling tty
      in = out = err = t;
    }
    ChildFailure f = {'u', 0};
    if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 ||
        (!slave.empty() && in > 2 && ::close(in) != 0)) {
      f = {'s', errno};
    } else if (!IdsAllowed(id)) {
      f.err = EINVAL;  // outside the sandbox's id map, as the kernel says where it keeps one
    } else if (setgroups(id.groups.size(), id.groups.data()) != 0 || setresgid(id.gid, id.gid, id.gid) != 0 ||
               setresuid(id.uid, id.uid, id.uid) != 0) {
      f.err = errno;
    } else {
      bool not_entered = cwd && chdir(cwd) != 0;
      if (not_entered && !(cwd_is_default && chdir("/") == 0)) {
        f = {'c', errno};
      } else {
        if (not_entered) (void)!::write(report[1], "/", 1);  // in / instead of the home
        execve(path, argv, envp);
        f = {'e', errno};
      }
    }
    (void)!::write(report[1], &f, sizeof f);
    _exit(127);
  }
  ::close(report[1]);
  if (pid < 0) {
    *failure = {'e', errno};
    ::close(report[0]);
    return -1;
  }
  // Until the exec closes the pipe: maybe the '/', then a failure if it did not exec.
  char got[1 + sizeof(ChildFailure)];
  size_t have = 0;
  while (have < sizeof got) {
    ssize_t n = ::read(report[0], got + have, sizeof got - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(report[0]);
  size_t skip = have > 0 && have != sizeof(ChildFailure) && got[0] == '/' ? 1 : 0;
  *fell_back = skip == 1;
  if (have - skip == sizeof(ChildFailure)) {
    ChildFailure f;
    std::memcpy(&f, got + skip, sizeof f);
    *failure = f;
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return -1;
  }
  return pid;
}

// posix_spawn (a vfork-style clone): the command in a session of its own, default
// signal dispositions, an empty mask, stdio on the pipes (or the terminal `slave`), only
// 0-2 open. Returns the pid, or -1 with *failure set.
pid_t SpawnAsRoot(const std::string& path, char* const* argv, char* const* envp, const char* cwd,
                  const std::string& slave, int in, int out, int err, const std::string& argv0, std::string* failure) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!slave.empty()) {
    // Opened after setsid, without O_NOCTTY: it becomes the session's controlling tty.
    posix_spawn_file_actions_addopen(&fa, 0, slave.c_str(), O_RDWR, 0);
    posix_spawn_file_actions_adddup2(&fa, 0, 1);
    posix_spawn_file_actions_adddup2(&fa, 0, 2);
  } else {
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
  }
  if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  pid_t pid = -1;
  int spawn_err = path.empty() ? ENOENT : posix_spawn(&pid, path.c_str(), &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (spawn_err == 0) return pid;
  struct stat st;
  bool bad_cwd = cwd && (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode));
  *failure = bad_cwd ? std::string("sbx: chdir to ") + cwd + ": " + strerror(errno ? errno : ENOTDIR) + "\n"
                     : "sbx: exec " + argv0 + ": " + strerror(spawn_err) + "\n";
  return -1;
}

bool HasVar(const std::vector<std::string>& env, const char* name) {
  size_t n = std::strlen(name);
  for (const auto& e : env)
    if (e.size() > n && e.compare(0, n, name) == 0 && e[n] == '=') return true;
  return false;
}

}  // namespace

Result<Spawned> SpawnCommand(const ExecRequest& req) {
  // Current before the command can read it; a file that cannot be written (the sandbox's
  // root made /run/sbx.env a folder) leaves the command its environment's.
  if (!req.self_env.empty()) (void)SyncSelfEnv(req.self_env);
  // A command for another user: who that is, from the sandbox's own files, and the
  // variables and working directory that follow from it.
  std::optional<Identity> as;
  std::vector<std::string> env = req.env;
  std::string cwd_dir = req.cwd;
  bool cwd_is_default = false;
  if (!req.user.empty()) {
    auto id = LookUpUser(req.user);
    if (!id.ok()) {
      Spawned s;
      s.failure = "sbx: user " + req.user + ": " + id.error().message + "\n";
      return s;
    }
    as = std::move(*id);
    if (!HasVar(env, "HOME")) env.push_back("HOME=" + as->home);
    if (!as->name.empty() && !HasVar(env, "USER")) env.push_back("USER=" + as->name);
    if (!as->name.empty() && !HasVar(env, "LOGNAME")) env.push_back("LOGNAME=" + as->name);
    // The default working directory is the home, or / when there is none (as login does).
    struct stat home;
    if (cwd_dir.empty()) {
      cwd_dir = stat(as->home.c_str(), &home) == 0 && S_ISDIR(home.st_mode) ? as->home : "/";
      cwd_is_default = true;
    }
  }
  // Everything the child needs is built here, before the spawn.
  std::string path = Resolve(req.argv[0], env);
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* cwd = cwd_dir.empty() ? nullptr : cwd_dir.c_str();  // empty: the agent's own

  Spawned s;
  s.cwd = cwd_dir;
  // With a tty the command's stdio is the slave of a new pseudo-terminal; sbx reads its
  // output from the master and writes its input there. stderr's pipe then stays empty.
  std::string slave;
  if (req.tty) {
    s.master.Reset(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    char name[128];
    if (!s.master.valid() || grantpt(s.master.get()) != 0 || unlockpt(s.master.get()) != 0 ||
        ptsname_r(s.master.get(), name, sizeof name) != 0)
      return ErrnoError("cannot open a pseudo-terminal");
    slave = name;
    struct winsize ws = {};
    ws.ws_col = static_cast<unsigned short>(req.cols);
    ws.ws_row = static_cast<unsigned short>(req.rows);
    ioctl(s.master.get(), TIOCSWINSZ, &ws);
  }
  int in[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1};
  if (pipe2(errp, O_CLOEXEC) || (!req.tty && pipe2(outp, O_CLOEXEC)) ||
      (!req.tty && req.stdin_open && pipe2(in, O_CLOEXEC))) {
    int err = errno;
    for (int fd : {in[0], in[1], outp[0], outp[1], errp[0], errp[1]})
      if (fd >= 0) close(fd);
    errno = err;
    return ErrnoError("pipe");
  }
  UniqueFd in_r(in[0]), out_w(outp[1]), err_w(errp[1]);
  s.in.Reset(in[1]);
  s.out.Reset(outp[0]);
  s.err.Reset(errp[0]);
  if (req.tty) {
    s.out.Reset(fcntl(s.master.get(), F_DUPFD_CLOEXEC, 0));
    if (req.stdin_open) s.in.Reset(fcntl(s.master.get(), F_DUPFD_CLOEXEC, 0));
  }
  UniqueFd devnull(req.stdin_open || req.tty ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC));
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (as) {
    // The terminal is the user's (as login makes it), so that what reopens it can.
    if (!slave.empty() && (chown(slave.c_str(), as->uid, -1) != 0 || chmod(slave.c_str(), 0620) != 0))
      return ErrnoError("give the terminal to user " + req.user);
    ChildFailure f = {};
    bool fell_back = false;
    s.pid = path.empty() ? -1
                         : ForkAs(*as, path.c_str(), argv.data(), envp.data(), cwd, cwd_is_default, slave,
                                  req.stdin_open ? in_r.get() : devnull.get(), out_w.get(), err_w.get(), &f,
                                  &fell_back);
    if (fell_back) s.cwd = "/";
    if (path.empty()) f = {'e', ENOENT};
    if (s.pid < 0) {
      s.failure = f.step == 'c'   ? std::string("sbx: chdir to ") + cwd + ": " + strerror(f.err) + "\n"
                  : f.step == 'u' ? "sbx: cannot become user " + req.user + ": " + strerror(f.err) + "\n"
                  : f.step == 's' ? std::string("sbx: cannot set up the command's stdio: ") + strerror(f.err) + "\n"
                                  : std::string("sbx: exec ") + req.argv[0] + ": " + strerror(f.err) + "\n";
    }
  } else {
    s.pid = SpawnAsRoot(path, argv.data(), envp.data(), cwd, slave, req.stdin_open ? in_r.get() : devnull.get(),
                        out_w.get(), err_w.get(), req.argv[0], &s.failure);
  }
  for (const UniqueFd* fd : {&s.out, &s.err, &s.in})
    if (fd->valid()) SetNonBlock(fd->get());
  return s;
}

ExitInfo ExitOf(int status, bool started) {
  ExitInfo info;
  if (!started) {
    info.exit_code = 127;
  } else if (WIFEXITED(status)) {
    info.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    info.signal = WTERMSIG(status);
    info.exit_code = 128 + info.signal;
  }
  return info;
}

void ResizeTerminal(int master, const std::string& payload) {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  if (!j.is_object()) return;
  struct winsize ws = {};
  ws.ws_col = static_cast<unsigned short>(std::clamp(j.value("cols", 80), 1, 10000));
  ws.ws_row = static_cast<unsigned short>(std::clamp(j.value("rows", 24), 1, 10000));
  ioctl(master, TIOCSWINSZ, &ws);
}

}  // namespace sbx::agent
