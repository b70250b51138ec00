#include "agent/server.h"

#include <fcntl.h>
#include <ftw.h>
#include <linux/fs.h>
#include <linux/random.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/exec_session.h"
#include "agent/files.h"
#include "agent/frame_io.h"
#include "agent/init/vm_disk.h"
#include "agent/init/vm_net.h"
#include "agent/port_relay.h"
#include "agent/process_keeper.h"
#include "agent/protocol.h"
#include "agent/self_env.h"
#include "base/base64.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

// True when this agent is PID 1 of a sandbox (its "/" is the sandbox's root).
bool g_is_init = false;
// Only peers outside the sandbox's pid namespace are served (see Serve).
bool g_outside_only = false;
pid_t g_only_peer = 0;  // nonzero: only this process's connections are served
int g_own_fs = -1;      // a folder on the sandbox's own disk (a VM's), for kSync's freeze
Result<UniqueFd> (*g_relisten)() = nullptr;  // SetRelisten's
void (*g_closed)() = nullptr;

// A restored VM takes the host's time and new randomness for its kernel (mixed into the
// pool and credited, then the kernel's generator reseeded at once), and where given a
// new hostname; "" when done, else what failed.
std::string Renew(const nlohmann::json& r) {
  if (!r.is_object() || !r["time_ns"].is_number_integer() || !r["entropy"].is_string())
    return "a renewal needs time_ns and entropy";
  const int64_t ns = r["time_ns"].get<int64_t>();
  struct timespec ts = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) return std::string("set the clock: ") + std::strerror(errno);
  auto seed = Base64Decode(r["entropy"].get<std::string>());
  if (!seed.ok() || seed->size() < 32 || seed->size() > 512) return "the entropy must be 32 to 512 bytes of base64";
  std::vector<char> info(sizeof(struct rand_pool_info) + seed->size());
  auto* pool = reinterpret_cast<struct rand_pool_info*>(info.data());
  pool->entropy_count = static_cast<int>(seed->size() * 8);
  pool->buf_size = static_cast<int>(seed->size());
  std::memcpy(pool->buf, seed->data(), seed->size());
  UniqueFd rnd(open("/dev/urandom", O_WRONLY | O_CLOEXEC));
  if (!rnd.valid() || ioctl(rnd.get(), RNDADDENTROPY, pool) != 0)
    return std::string("add entropy: ") + std::strerror(errno);
  if (ioctl(rnd.get(), RNDRESEEDCRNG) != 0) return std::string("reseed the kernel's generator: ") + std::strerror(errno);
  if (r.contains("hostname") && r["hostname"].is_string()) {
    const std::string h = r["hostname"].get<std::string>();
    if (sethostname(h.data(), h.size()) != 0) return std::string("set the hostname: ") + std::strerror(errno);
  }
  if (r.contains("net") && r["net"].is_object()) {
    if (Status st = ReaddressVmNetwork(r["net"].dump()); !st.ok()) return "readdress eth0: " + st.error().message;
  }
  return "";
}

// kSync: {} syncs; {"freeze": true} also freezes the sandbox's own disk's file system
// (its journal flushed and marked clean: an image of the disk is then whole), and
// {"thaw": true} thaws it. Freezing what is frozen, or thawing what is not, is no error.
// {"renew": {...}} renews a restored VM (Renew). {"grow_disk": BYTES} grows the own
// disk's file system once the disk is that large (vm_disk.h). {"self_env": "..."}
// rewrites /run/sbx.env (self_env.h).
void ServeSync(int sock, const std::string& payload) {
  auto j = nlohmann::json::parse(payload.empty() ? "{}" : payload, nullptr, false);
  if (j.is_object() && j.contains("renew")) {
    // Only the VM's own agent as PID 1 has a clock and a kernel generator of its own to renew.
    std::string err = g_own_fs < 0 ? "this sandbox has no kernel of its own to renew" : Renew(j["renew"]);
    if (!err.empty()) {
      SendErrorMessage(sock, "renew the sandbox: " + err);
      return;
    }
    WriteAllBlocking(sock, EncodeFrame(FrameType::kSyncDone, "{}"));
    return;
  }
  if (j.is_object() && j.contains("self_env")) {
    Status st = j["self_env"].is_string() ? SyncSelfEnv(j["self_env"].get<std::string>())
                                          : MakeError(Code::kInvalidArgument, "self_env wants the file's content");
    if (!st.ok()) {
      SendErrorMessage(sock, "write the sandbox's " + std::string(kSelfEnvPath) + ": " + st.error().message);
      return;
    }
    WriteAllBlocking(sock, EncodeFrame(FrameType::kSyncDone, "{}"));
    return;
  }
  if (j.is_object() && j.contains("grow_disk")) {
    std::string err = g_own_fs < 0 ? "this sandbox has no disk of its own to grow"
                      : !j["grow_disk"].is_number_unsigned() ? "grow_disk wants the disk's size in bytes"
                                                             : "";
    if (err.empty())
      if (Status st = GrowToDevice(g_own_fs, j["grow_disk"].get<uint64_t>(), 5000); !st.ok()) err = st.error().message;
    if (!err.empty()) {
      SendErrorMessage(sock, "grow the sandbox's disk: " + err);
      return;
    }
    WriteAllBlocking(sock, EncodeFrame(FrameType::kSyncDone, "{}"));
    return;
  }
  const bool freeze = j.is_object() && j.value("freeze", false), thaw = j.is_object() && j.value("thaw", false);
  std::string err;
  if (thaw) {
    if (g_own_fs >= 0 && ioctl(g_own_fs, FITHAW, 0) != 0 && errno != EINVAL) err = std::strerror(errno);
  } else {
    ::sync();
    if (freeze && g_own_fs < 0) err = "this sandbox has no disk of its own to freeze";
    if (freeze && g_own_fs >= 0 && ioctl(g_own_fs, FIFREEZE, 0) != 0 && errno != EBUSY) err = std::strerror(errno);
  }
  if (!err.empty()) {
    SendErrorMessage(sock, std::string(thaw ? "thaw" : "freeze") + " the sandbox's disk: " + err);
    return;
  }
  WriteAllBlocking(sock, EncodeFrame(FrameType::kSyncDone, "{}"));
}

[[gnu::noinline]] void WarmStack() {
  volatile char stack[64 << 10];
  for (size_t i = 0; i < sizeof stack; i += 4096) stack[i] = 0;
}

// Makes a fresh fork ready to serve before it waits for a connection: the pages it
// writes are its own already. A fork shares its parent's pages until a write, and under
// gVisor each first write in the child is a fault that the sentry serves (a ping took
// 15.7 ms, 2.2 with this). Writes back a byte of every private writable page of the
// binary (data, bss) and of its anonymous memory up to 1 MiB a mapping (the heap; not
// another thread's stack, whose untouched pages would become memory), then 64 KiB of
// stack. This process has one thread and no signal handler: nothing writes meanwhile.
void WarmPages() {
  FILE* maps = fopen("/proc/self/maps", "re");
  if (!maps) return;
  char line[512];
  while (fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    char path[256] = {};
    if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %255s", &lo, &hi, perms, path) < 3) continue;
    const bool ours = path[0] == '\0' || path[0] == '/' || strcmp(path, "[heap]") == 0;
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || !ours || hi - lo > (1ul << 20)) continue;
    for (unsigned long a = lo; a < hi; a += 4096) {
      volatile char* p = reinterpret_cast<volatile char*>(a);
      *p = *p;
    }
  }
  fclose(maps);
  WarmStack();
}

// Serves the one request of the connection `sock`.
void ServeConnection(int sock) {
  FrameDecoder in;
  Frame f;
  while (NextFrame(sock, &in, &f)) {
    if (f.type == FrameType::kPing) {
      if (!WriteAllBlocking(sock, EncodeFrame(FrameType::kPong, ThisAgent().ToJson()))) return;
      continue;
    }
    if (f.type == FrameType::kSync) return ServeSync(sock, f.payload);
    if (f.type == FrameType::kWarm) {
      // Stat every entry of the root filesystem (not /proc, /sys, /dev, /tmp: other
      // mounts) so that the first commands find their files in the dentry cache.
      static long entries;
      entries = 0;
      // At idle priority: warming must never slow a command running elsewhere. (This
      // handler exits after, so the setting dies with it.)
      struct sched_param sp = {};
      sched_setscheduler(0, SCHED_IDLE, &sp);
      // Outside a sandbox "/" is the host's: nothing to warm there.
      if (g_is_init)
        nftw("/", [](const char*, const struct stat*, int, struct FTW*) { ++entries; return 0; }, 32,
             FTW_PHYS | FTW_MOUNT);
      nlohmann::json j = {{"entries", entries}};
      WriteAllBlocking(sock, EncodeFrame(FrameType::kWarmDone, j.dump()));
      return;
    }
    if (f.type == FrameType::kFileOp) {
      // Paths resolve in the sandbox's root ("/" here, after the pivot); an agent serving
      // outside a sandbox (development) resolves them in its working directory instead.
      UniqueFd root(open(g_is_init ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!root.valid()) {
        SendErrorMessage(sock, std::string("cannot open the root: ") + strerror(errno));
        return;
      }
      umask(0);  // modes are set exactly as asked
      ServeFileOp(sock, &in, f.payload, root.get());
      return;
    }
    if (f.type == FrameType::kPortOpen) {
      ServePortOpen(sock, &in, f.payload);
      return;
    }
    if (f.type == FrameType::kProcStart) {
      ServeProcStart(sock, &in, f.payload);
      return;
    }
    if (f.type == FrameType::kProcAttach) {
      ServeProcAttach(sock, f.payload);
      return;
    }
    if (f.type == FrameType::kProcList) {
      ServeProcList(sock);
      return;
    }
    if (f.type != FrameType::kExec) {
      SendErrorMessage(sock, "expected an exec, process, file, port or ping frame");
      return;
    }
    auto req = ExecRequest::FromJson(f.payload);
    if (!req.ok()) {
      SendErrorMessage(sock, req.error().message);
      return;
    }
    ExecSession(sock, &in).Run(*req);
    return;
  }
}

// A spare handler: blocks in accept() on the shared listening socket, tells PID 1 it
// took a connection (so PID 1 forks its replacement off the request's path), then serves
// that one connection and exits.
[[noreturn]] void RunSpare(int listen_fd, int notify_w, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before the prctl took effect: then nobody would signal us.
  if (getppid() != parent) _exit(0);
  // PID 1 may be shielded from the OOM killer; a handler and its commands are not.
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    ssize_t w = write(oom, "0", 1);
    (void)w;
    close(oom);
  }
  WarmPages();
  int c;
  while (true) {
    c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    // In a container, only a peer outside its pid namespace (sbxd, whose pid reads as 0
    // here) is served: the sandbox's own processes can reach the abstract name.
    struct ucred cred = {};
    socklen_t len = sizeof cred;
    // In a microVM, only the channel mux's connections (the sandbox's root could dial the
    // abstract name too).
    bool creds = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
    if (g_only_peer != 0 ? creds && cred.pid == g_only_peer : !g_outside_only || (creds && cred.pid == 0)) break;
    close(c);
  }
  pid_t me = getpid();
  ssize_t w = write(notify_w, &me, sizeof me);
  (void)w;
  close(notify_w);
  close(listen_fd);
  if (c >= 0) ServeConnection(c);
  _exit(0);
}

}  // namespace

void SetOwnDisk(int fd) { g_own_fs = fd; }
void SetRelisten(Result<UniqueFd> (*relisten)(), void (*closed)()) {
  g_relisten = relisten;
  g_closed = closed;
}

Status Serve(int given_fd, bool is_init, bool outside_peers_only, pid_t only_peer) {
  constexpr size_t kSpares = 2;
  g_is_init = is_init;
  EnableSelfEnv(is_init);
  g_only_peer = only_peer;
  g_outside_only = is_init && outside_peers_only;
  SetKeeperScope(getpid());
  // With SetRelisten the listening socket is ours (the given one, then each `relisten`
  // makes); `listen_fd` is -1 while it is closed for a checkpoint.
  UniqueFd owned(g_relisten ? given_fd : -1);
  int listen_fd = given_fd;
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (g_relisten) {
    sigaddset(&chld, SIGUSR1);
    sigaddset(&chld, SIGUSR2);
  }
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  signal(SIGPIPE, SIG_IGN);
  UniqueFd sfd(signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sfd.valid()) return ErrnoError("signalfd");
  int np[2];
  if (pipe2(np, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe");
  UniqueFd notify_r(np[0]), notify_w(np[1]);
  // Outside a sandbox (development and unit tests) the agent is no PID 1: it still
  // collects the orphans of its commands.
  if (!is_init) prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::set<pid_t> spares;  // forked, not yet holding a connection
  const pid_t self = getpid();
  auto fork_spare = [&]() -> bool {
    pid_t p = fork();
    if (p == 0) {
      sfd.Reset();
      notify_r.Reset();
      RunSpare(listen_fd, notify_w.get(), self);
    }
    if (p < 0) return false;
    spares.insert(p);
    return true;
  };
  // A spare taken is replaced at once when none is left, else once no handler serves
  // (or after kRefillMs): a fork and the new spare's WarmPages beside a request slow it,
  // by milliseconds under gVisor.
  constexpr int64_t kRefillMs = 1000;
  std::set<pid_t> serving;  // handlers that took a connection and have not ended
  int64_t refill_at = 0;    // CLOCK_MONOTONIC ms
  while (true) {
    // Keep the spares topped up (a failed fork, e.g. at the pids limit, is retried on
    // the next event or after a short wait).
    bool short_of_spares = false;
    int wait_ms = -1;
    const int64_t now = MonoMs();
    if (!spares.empty() && spares.size() < kSpares && !serving.empty() && now < refill_at)
      wait_ms = static_cast<int>(refill_at - now);
    while (wait_ms < 0 && listen_fd >= 0 && spares.size() < kSpares)
      if (!fork_spare()) {
        short_of_spares = true;
        break;
      }
    if (short_of_spares) wait_ms = 50;
    struct pollfd p[2] = {{notify_r.get(), POLLIN, 0}, {sfd.get(), POLLIN, 0}};
    int rc = poll(p, 2, wait_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll");
    }
    if (p[0].revents & POLLIN) {
      pid_t taken;
      while (read(notify_r.get(), &taken, sizeof taken) == sizeof taken) {
        spares.erase(taken);
        serving.insert(taken);
      }
      refill_at = MonoMs() + kRefillMs;
    }
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      bool close_listener = false, reopen = false;
      while (read(sfd.get(), &si, sizeof si) > 0) {
        if (si.ssi_signo == SIGUSR1) close_listener = true, reopen = false;
        if (si.ssi_signo == SIGUSR2) reopen = true, close_listener = false;
      }
      if (close_listener && listen_fd >= 0) {
        // Every holder of the socket goes: the spares (killed and reaped here, so that
        // the socket is closed by the time `closed` says so), then ours.
        for (pid_t s : spares) kill(s, SIGKILL);
        for (pid_t s : spares) waitpid(s, nullptr, 0);
        spares.clear();
        owned.Reset();
        listen_fd = -1;
        g_closed();
      }
      if (reopen && listen_fd < 0) {
        auto l = g_relisten();
        if (l.ok()) {
          owned = std::move(*l);
          listen_fd = owned.get();
        }
        // A failure leaves the agent closed: sbxd's wait for it ends the sandbox.
      }
      int st;
      pid_t r;
      while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
        spares.erase(r);  // a spare killed idle
        serving.erase(r);
      }
    }
  }
}

}  // namespace sbx::agent
