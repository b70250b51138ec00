#include "runtime/container/criu_probe.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>

#include "base/fs.h"
#include "base/ids.h"
#include "base/reaper.h"
#include "base/unique_fd.h"

namespace sbx::runtime {
namespace {

Status Probe(const std::string& criu, int64_t timeout_ms) {
  char dir[] = "/tmp/sbx-criu-probe.XXXXXX";
  if (!::mkdtemp(dir)) return ErrnoError("mkdtemp");
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // As plain a process as can be: its own session, default signals, nothing but stdio.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  char sleep_path[] = "/bin/sleep", arg0[] = "sleep", arg1[] = "120";
  char* argv[] = {arg0, arg1, nullptr};
  char* envp[] = {nullptr};
  pid_t pid = -1;
  int err = posix_spawn(&pid, sleep_path, &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    (void)fs::RemoveTree(dir);
    errno = err;
    return ErrnoError("start /bin/sleep for the CRIU test");
  }
  // Killed by its pidfd: once CRIU ended it (a dump does) its pid may be another's.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  auto r = Reaper::Get().Run({criu, "dump", "-t", std::to_string(pid), "-D", dir, "--log-file", "dump.log", "-v1"},
                             "", 0, nullptr, timeout_ms);
  if (pidfd.valid()) ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
  std::string log;
  if (auto text = fs::ReadFile(std::string(dir) + "/dump.log", 1 << 16); text.ok()) log = *text;
  (void)fs::RemoveTree(dir);
  if (!r.ok()) return r.error();  // (not CRIU's verdict: not kept)
  if (r->timed_out)
    return MakeError(Code::kUnavailable, "a checkpoint of a test process did not end within " +
                                             std::to_string(timeout_ms / 1000) + " s");
  if (r->exit_code != 0) {
    size_t at = log.find("Error");
    std::string why = at == std::string::npos ? r->output : log.substr(at, 300);
    return MakeError(Code::kUnavailable,
                     "a checkpoint of a test process failed (exit " + std::to_string(r->exit_code) + "): " + why);
  }
  return OkStatus();
}

}  // namespace

Status CriuCanCheckpoint(const std::string& criu, int64_t timeout_ms) {
  struct stat st;
  struct utsname u;
  if (::stat(criu.c_str(), &st) != 0) return ErrnoError("stat " + criu);
  ::uname(&u);
  std::string key = criu + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec) + "\n" + u.release + "\n" + u.version;
  std::string cache = "/run/sbx/criu-probe-" + Sha256Hex(key).substr(0, 16);
  if (auto kept = fs::ReadFile(cache, 4096); kept.ok() && !kept->empty()) {
    if (*kept == "ok\n") return OkStatus();
    return MakeError(Code::kUnavailable, kept->substr(0, kept->find('\n')) + " (kept from an earlier test in " +
                                             cache + "; remove it to test again)");
  }
  Status st_probe = Probe(criu, timeout_ms);
  // A slow machine gets a second chance before the verdict is kept for the boot.
  if (!st_probe.ok() && st_probe.error().message.find("did not end") != std::string::npos)
    st_probe = Probe(criu, timeout_ms);
  // Only CRIU's own verdicts are kept (kUnavailable: it failed or hung), not a failure to
  // set the test up. Written under a name of its own, then renamed: daemons starting at
  // once each write a whole file.
  if ((st_probe.ok() || st_probe.error().code == Code::kUnavailable) && fs::MkdirAll("/run/sbx", 0755).ok()) {
    std::string tmp = cache + ".tmp-" + RandomHex(6);
    if (fs::WriteFile(tmp, st_probe.ok() ? "ok\n" : st_probe.error().message + "\n").ok() &&
        ::rename(tmp.c_str(), cache.c_str()) != 0)
      ::unlink(tmp.c_str());
  }
  return st_probe;
}

}  // namespace sbx::runtime
