#include "runtime/microvm/qemu.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "agent/vm_config.h"
#include "base/reaper.h"

namespace sbx::runtime::microvm {
namespace {

std::string Hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

// The host's TSC rate in kHz: under TCG the guest's early calibration against the PIT
// fails now and then on microvm (it has no HPET to fall back on), so the rate is given.
std::string TscKhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    double mhz = std::atof(line.c_str() + colon + 1);
    if (mhz > 0) return std::to_string(static_cast<long long>(mhz * 1000));
    break;
  }
  return "";
}

std::vector<std::string> Machine(const std::string& accel, const std::string& machine = "microvm") {
  if (accel == "kvm") return {"-M", machine, "-accel", "kvm", "-cpu", "host"};
  // One host thread runs the vCPUs; a 64 MiB translation cache (QEMU's default is far
  // larger, and each VM's cache counts against its memory).
  return {"-M", machine, "-accel", "tcg,thread=single,tb-size=64", "-cpu", "max"};
}

}  // namespace

std::string KernelCmdline(const std::string& config_json, const std::string& accel) {
  std::string c = "console=ttyS0 reboot=t panic=-1 8250.nr_uarts=1 i8042.noaux i8042.nokbd i8042.nopnp "
                  "random.trust_cpu=on quiet";
  const std::string tsc = TscKhz();
  if (!tsc.empty()) c += " tsc_early_khz=" + tsc;
  // Under TCG every vCPU reads one TSC, QEMU's own clock, but the guest's check of it
  // across CPUs fails on emulation's jitter: it would fall back to the jiffies clock,
  // with a 4 ms resolution and a periodic tick that keeps an idle guest using a tenth
  // of a host core. KVM guests have kvm-clock.
  if (accel != "kvm") c += " tsc=reliable";
  return c + " sbx.cfg=" + Hex(config_json);
}

std::vector<std::string> QemuArgv(const VmSpec& s) {
  std::vector<std::string> a = {s.qemu};
  for (auto& m : Machine(s.accel, s.shared_ram ? "microvm,memory-backend=ram" : "microvm")) a.push_back(m);
  auto add = [&](std::initializer_list<std::string> l) { a.insert(a.end(), l); };
  if (s.shared_ram) {
    // The guest's RAM is the memfd --vm-launch made, mapped shared; a save leaves it out
    // of the stream (x-ignore-shared) and sbxd copies it (microvm/vm_memory.h).
    add({"-object", "memory-backend-file,id=ram,size=" + std::to_string(s.memory_mb) + "M,mem-path=/proc/self/fd/" +
                        std::to_string(agent::kRamFd) + ",share=on"});
  }
  add({"-smp", std::to_string(s.cpus), "-m", std::to_string(s.memory_mb), "-nodefaults", "-no-user-config",
       "-display", "none", "-no-reboot", "-kernel", s.kernel, "-initrd", s.initrd, "-append",
       KernelCmdline(s.config, s.accel)});
  add({"-chardev", "socket,id=con,path=console.sock,server=on,wait=off", "-serial", "chardev:con"});
  if (s.vsock_cid > 0)
    add({"-device", "vhost-vsock-device,guest-cid=" + std::to_string(s.vsock_cid) +
                        ",vhostfd=" + std::to_string(agent::kVsockFd)});
  else
    add({"-device", "virtio-serial-device", "-chardev", "socket,id=agent,path=agent.sock,server=on,wait=off",
         "-device", std::string("virtserialport,chardev=agent,name=") + agent::kVmAgentPort});
  add({"-object", "rng-random,id=rng,filename=/dev/urandom", "-device", "virtio-rng-device,rng=rng"});
  add({"-drive", std::string("id=") + kOwnDrive + ",file=" + s.own_disk + ",format=raw,if=none,cache=writeback,discard=unmap",
       "-device", std::string("virtio-blk-device,drive=") + kOwnDrive + ",serial=sbx-upper"});
  for (size_t i = 0; i < s.layer_images.size(); ++i) {
    const std::string id = "l" + std::to_string(i);
    add({"-drive", "id=" + id + ",file=" + s.layer_images[i] + ",format=raw,if=none,read-only=on",
         "-device", "virtio-blk-device,drive=" + id + ",serial=sbx-layer-" + std::to_string(i)});
  }
  for (size_t i = 0; i < s.shared.size(); ++i) {
    std::string path;  // a comma in an option's value is written twice
    for (char c : s.shared[i]) path += c == ',' ? std::string(",,") : std::string(1, c);
    // passthrough: the guest's owners and modes are the files' own, as a container sees them.
    const std::string id = "d" + std::to_string(i);
    add({"-fsdev", "local,id=" + id + ",path=" + path + ",security_model=passthrough", "-device",
         "virtio-9p-device,fsdev=" + id + ",mount_tag=" + agent::VmDiskTag(i)});
  }
  if (!s.tap.empty())
    add({"-netdev", "tap,id=net,fd=" + std::to_string(agent::kTapFd), "-device",
         "virtio-net-device,netdev=net,mac=" + s.mac});
  add({"-qmp", "unix:qmp.sock,server=on,wait=off"});
  // The load waits for the monitor to set it up (microvm/vm_memory.h).
  if (s.incoming) add({"-incoming", "defer"});
  add({"-pidfile", "qemu.pid"});
  // QEMU's system-call filter: no new processes, no privilege changes, no scheduling or
  // resource-control calls, nothing obsolete.
  add({"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"});
  return a;
}

std::vector<std::string> LaunchArgv(const Launch& how, const VmSpec& s) {
  std::vector<std::string> a = {how.agent, "--vm-launch", how.vm, std::to_string(how.uid), std::to_string(how.uid),
                                how.vm + "/qemu.log", "--ram", std::to_string(s.memory_mb)};
  if (!s.tap.empty()) a.insert(a.end(), {"--tap", s.tap});
  if (s.vsock_cid > 0) a.emplace_back("--vsock");
  // QEMU's jail shows it these and its own folder, nothing else of the host's.
  for (const std::string& f : {s.kernel, s.initrd}) a.insert(a.end(), {"--ro", f});
  for (const auto& f : s.layer_images) a.insert(a.end(), {"--ro", f});
  a.insert(a.end(), {"--rw", s.own_disk});
  // Its disks: QEMU serves them with the sandboxes' ids (agent/vm_jail.h ShareIds).
  for (const auto& d : s.shared) a.insert(a.end(), {"--rw", d});
  if (!how.share_ids.empty()) a.insert(a.end(), {"--share-ids", how.share_ids});
  if (!how.ram_from.empty()) a.insert(a.end(), {"--ram-from", how.ram_from});
  if (!how.incoming.empty()) a.insert(a.end(), {"--incoming", how.incoming});
  a.emplace_back("--");
  for (auto& q : QemuArgv(s)) a.push_back(std::move(q));
  return a;
}

Status ProbeKvm(const std::string& qemu, const std::string& kernel, const std::string& initrd, int timeout_ms) {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open /dev/kvm");
  ::close(fd);
  agent::VmConfig probe;
  probe.probe = true;
  std::vector<std::string> argv = {qemu};
  for (auto& m : Machine("kvm")) argv.push_back(m);
  for (const std::string& x : {std::string("-m"), std::string("128"), std::string("-nodefaults"),
                               std::string("-no-user-config"), std::string("-display"), std::string("none"),
                               std::string("-no-reboot"), std::string("-serial"), std::string("stdio"),
                               std::string("-kernel"), kernel, std::string("-initrd"), initrd,
                               std::string("-append"), KernelCmdline(probe.ToJson(), "kvm")})
    argv.push_back(x);
  auto r = Reaper::Get().Run(argv, "", 0, nullptr, timeout_ms);
  if (!r.ok()) return r.error();
  if (r->output.find(agent::kVmProbeLine) != std::string::npos) return OkStatus();
  if (r->timed_out) return MakeError(Code::kDeadlineExceeded, "a KVM guest did not boot within " +
                                                                  std::to_string(timeout_ms) + " ms");
  std::string out = r->output.size() > 300 ? r->output.substr(r->output.size() - 300) : r->output;
  return MakeError(Code::kFailedPrecondition, "a KVM guest did not boot: " + out);
}

}  // namespace sbx::runtime::microvm
