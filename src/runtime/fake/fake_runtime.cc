// A runtime without isolation, for unit tests: the real sbx-agent in --serve mode as a
// plain child process. Same files and protocol as the container runtime, no namespaces.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

#include "agent/protocol.h"
#include "base/fs.h"
#include "base/proc.h"
#include "layers/layer_copy.h"
#include "runtime/process_handle.h"
#include "runtime/runtime.h"
#include "runtime/unix_dialer.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

namespace sbx::runtime {
namespace {

class FakeRuntime : public Runtime {
 public:
  explicit FakeRuntime(std::string agent) : agent_(std::move(agent)) {}
  std::string Kind() const override { return "fake"; }
  // Freeze and Thaw succeed but hold nothing still (no cgroup).
  Capabilities Caps() const override { return Capabilities{.freeze = true}; }

  Status Prepare(const StartSpec& spec) override {
    SBX_RETURN_IF_ERROR(fs::MkdirAll(spec.dir + "/ctl", 0700));
    return fs::MkdirAll(spec.dir + "/upper", 0755);
  }

  Result<Instance> Start(const StartSpec& spec) override {
    std::string sock = spec.dir + "/ctl/a.sock";
    ::unlink(sock.c_str());
    const char* agent = agent_.c_str();
    std::string upper = spec.dir + "/upper";
    char a0[] = "sbx-agent", a1[] = "--serve";
    char* argv[] = {a0, a1, const_cast<char*>(sock.c_str()), nullptr};
    int pidfd = -1;
    pid_t pid = static_cast<pid_t>(
        ::syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, nullptr, &pidfd, nullptr, nullptr));
    if (pid == 0) {
      int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::syscall(SYS_close_range, 3, ~0U, 0);
      if (::chdir(upper.c_str()) != 0) ::_exit(126);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execv(agent, argv);
      ::_exit(127);
    }
    if (pid < 0) return ErrnoError("clone");
    Instance inst;
    SetProcess(&inst, pid, UniqueFd(pidfd));
    inst.agent = std::make_shared<UnixDialer>(sock);
    for (int i = 0; i < 2000; ++i) {
      if (agent::PingBlocking(*inst.agent, 1000).ok()) return inst;
      if (proc::PidfdExited(pidfd)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    (void)Stop(spec.id, inst);
    return MakeError(Code::kInternal, "the agent did not come up");
  }

  Status Stop(const std::string&, const Instance& inst) override {
    if (const ProcessHandle* p = ProcessOf(inst); p && p->pidfd.valid()) {
      (void)proc::PidfdSignal(p->pidfd.get(), SIGKILL);
      proc::PidfdWait(p->pidfd.get(), 5000);
    }
    return OkStatus();
  }

  // Without a cgroup there are no limits to change.
  Status UpdateLimits(const std::string&, const Limits&) override { return OkStatus(); }

  // Without a cgroup there is nothing to freeze; tests of the fake runtime write no files
  // while they capture.
  Status Freeze(const std::string&) override { return OkStatus(); }
  Status Thaw(const std::string&) override { return OkStatus(); }

  Status Destroy(const std::string&, const std::string& dir) override { return fs::RemoveTree(dir); }

  bool HasFiles(const std::string& dir) override { return fs::IsDir(dir + "/upper"); }
  Result<Captured> CaptureFiles(const std::string& dir, const std::string& dst) override {
    SBX_ASSIGN_OR_RETURN(layers::CopyStats copied, layers::CopyTree(dir + "/upper", dst));
    return Captured{"", copied.bytes};
  }
  Status RemoveLayer(const std::string& path) override { return fs::RemoveTree(path); }

  Result<Instance> Adopt(const StartSpec& spec, const std::string& saved_state, bool frozen) override {
    SBX_ASSIGN_OR_RETURN(auto p, OpenSavedProcess(saved_state));
    Instance inst;
    SetProcess(&inst, std::move(p));
    inst.agent = std::make_shared<UnixDialer>(spec.dir + "/ctl/a.sock");
    if (!frozen) SBX_RETURN_IF_ERROR(agent::PingBlocking(*inst.agent, 2000));
    return inst;
  }

  // The agent's own CPU time and that of the children it has reaped.
  uint64_t CpuUsageNs(const std::string&, const Instance& inst) override {
    const ProcessHandle* p = ProcessOf(inst);
    return p ? proc::CpuTimeNs(p->pid) : 0;
  }

  std::vector<std::string> ListKernelObjects() override { return {}; }
  bool Alive(const Instance& inst) override { return ProcessAlive(inst); }

 private:
  std::string agent_;
};

}  // namespace

std::unique_ptr<Runtime> NewFakeRuntime(const std::string& agent_path) {
  return std::make_unique<FakeRuntime>(agent_path);
}

}  // namespace sbx::runtime
