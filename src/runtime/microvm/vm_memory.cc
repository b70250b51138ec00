#include "runtime/microvm/vm_memory.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/vm_config.h"
#include "base/fs.h"
#include "base/unique_fd.h"
#include "runtime/microvm/guest_files.h"
#include "runtime/microvm/qemu.h"
#include "runtime/microvm/qmp.h"

namespace sbx::runtime::microvm {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kMonitor = "qmp.sock";

// The stream leaves out the shared RAM, which sbxd copies itself.
Status IgnoreSharedRam(Qmp& q) {
  auto set = q.Execute("migrate-set-capabilities", {{"capabilities", json::array({{{"capability", "x-ignore-shared"}, {"state", true}}})}});
  if (!set.ok()) return set.error();
  return OkStatus();
}

}  // namespace

// QEMU's descriptor of the guest's RAM, as root reaches it.
std::string RamPath(pid_t pid) { return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(agent::kRamFd); }

Result<std::pair<uint64_t, uint64_t>> RamIdentity(pid_t pid) {
  struct stat st;
  if (::stat(RamPath(pid).c_str(), &st) != 0) return ErrnoError("stat the VM's RAM");
  return std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
}

namespace {

// Copies the stopped VM's RAM (the pages the guest touched and holds data in) into the
// sparse file `to`.
Result<uint64_t> CopyRam(const RunningVm& vm, uint64_t size, const std::string& to) {
  // QEMU's user may have put anything on that descriptor: only the memfd it was given,
  // whole, is read.
  UniqueFd ram(::open(RamPath(vm.pid).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!ram.valid()) return ErrnoError("open the VM's RAM");
  struct stat st;
  if (::fstat(ram.get(), &st) != 0) return ErrnoError("stat the VM's RAM");
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_dev) != vm.ram_dev ||
      static_cast<uint64_t>(st.st_ino) != vm.ram_ino || static_cast<uint64_t>(st.st_size) != size)
    return MakeError(Code::kInternal, "the VM's RAM is not the memory it was given");
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out.valid()) return ErrnoError("create " + to);
  if (::ftruncate(out.get(), static_cast<off_t>(size)) != 0) return ErrnoError("size " + to);
  SBX_ASSIGN_OR_RETURN(uint64_t copied, fs::CopyData(ram.get(), out.get(), size, /*skip_zero_pages=*/true));
  if (::fsync(out.get()) != 0) return ErrnoError("fsync " + to);
  return copied;
}

}  // namespace

Result<uint64_t> SaveVm(const RunningVm& vm, const SavedShape& shape, const std::string& out, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const std::string stream = out + "/" + kSavedMemory;
  UniqueFd fd(::open(stream.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return ErrnoError("create " + stream);
  SBX_ASSIGN_OR_RETURN(Qmp q, Qmp::Connect(vm.dir, kMonitor, vm.uid, MsLeft(deadline)));
  q.set_deadline_ms(MsLeft(deadline));
  // Stopped first: the RAM holds still for its copy, and the disk stays as it knows it.
  SBX_RETURN_IF_ERROR(q.Execute("stop"));
  Status st = IgnoreSharedRam(q);
  if (auto got = st.ok() ? q.Execute("getfd", {{"fdname", "sbx-save"}}, fd.get()) : Result<json>(st.error()); !got.ok())
    st = got.error();
  if (st.ok()) {
    auto go = q.Execute("migrate", {{"uri", "fd:sbx-save"}});
    if (!go.ok()) st = go.error();
  }
  if (st.ok()) st = q.WaitMigration(MsLeft(deadline));
  if (st.ok() && ::fsync(fd.get()) != 0) st = ErrnoError("fsync " + stream);
  struct stat sb = {};
  if (st.ok() && ::fstat(fd.get(), &sb) != 0) st = ErrnoError("stat " + stream);
  uint64_t ram_bytes = 0;
  if (st.ok()) {
    auto copied = CopyRam(vm, shape.memory_mb << 20, out + "/" + kSavedRam);
    if (copied.ok()) ram_bytes = *copied;
    else st = copied.error();
  }
  SavedShape s = shape;
  s.bytes = static_cast<uint64_t>(sb.st_size) + ram_bytes;
  json j = {{"accel", s.accel}, {"cpus", s.cpus}, {"memory_mb", s.memory_mb},
            {"layers", s.layers}, {"tap", s.tap}, {"vsock", s.vsock}, {"bytes", s.bytes}};
  if (st.ok()) st = fs::WriteFileAtomic(out + "/" + kSavedShape, j.dump() + "\n", 0600);
  if (!st.ok()) {
    // The VM goes on as it was.
    (void)q.Execute("migrate_cancel");
    (void)q.Execute("cont");
    return st.error().Wrap("saving the VM");
  }
  return s.bytes;
}

Result<SavedShape> ReadSavedShape(const std::string& dir) {
  SBX_ASSIGN_OR_RETURN(std::string text, fs::ReadFile(dir + "/" + kSavedShape, 1 << 16));
  auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j["accel"].is_string() || !j["cpus"].is_number_integer() ||
      !j["memory_mb"].is_number_unsigned() || !j["layers"].is_number_integer() || !j["tap"].is_boolean())
    return MakeError(Code::kInternal, "the saved VM's shape in " + dir + " is malformed");
  SavedShape s;
  s.accel = j["accel"].get<std::string>();
  s.cpus = j["cpus"].get<int>();
  s.memory_mb = j["memory_mb"].get<uint64_t>();
  s.layers = j["layers"].get<int>();
  s.tap = j["tap"].get<bool>();
  s.vsock = j.value("vsock", false);
  s.bytes = j.value("bytes", uint64_t{0});
  if (!fs::Exists(dir + "/" + kSavedMemory) || !fs::Exists(dir + "/" + kSavedRam))
    return MakeError(Code::kInternal, "the saved VM in " + dir + " is not whole");
  return s;
}

Status RunLoadedVm(const std::string& vm_dir, uid_t uid, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  SBX_ASSIGN_OR_RETURN(Qmp q, Qmp::Connect(vm_dir, kMonitor, uid, MsLeft(deadline)));
  q.set_deadline_ms(MsLeft(deadline));
  SBX_RETURN_IF_ERROR(IgnoreSharedRam(q));
  SBX_RETURN_IF_ERROR(q.Execute("migrate-incoming", {{"uri", "fd:" + std::to_string(agent::kIncomingFd)}}));
  for (;;) {
    q.set_deadline_ms(MsLeft(deadline));
    auto state = q.RunState();
    if (!state.ok()) return state.error().Wrap("loading the saved VM");
    if (*state == "running") return OkStatus();
    // Saved stopped, it loads stopped.
    if (*state == "paused") {
      SBX_RETURN_IF_ERROR(q.Execute("cont"));
      return OkStatus();
    }
    if (*state != "inmigrate") return MakeError(Code::kInternal, "the saved VM did not load (QEMU is " + *state + ")");
    if (Clock::now() > deadline) return MakeError(Code::kDeadlineExceeded, "the saved VM did not load in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status ContinueVm(const std::string& vm_dir, uid_t uid, int timeout_ms) {
  SBX_ASSIGN_OR_RETURN(Qmp q, Qmp::Connect(vm_dir, kMonitor, uid, timeout_ms));
  q.set_deadline_ms(timeout_ms);
  SBX_ASSIGN_OR_RETURN(std::string state, q.RunState());
  if (state == "running") return OkStatus();
  (void)q.Execute("migrate_cancel");
  SBX_RETURN_IF_ERROR(q.Execute("cont"));
  return OkStatus();
}

Status RenewLoadedVm(const LoadedVm& vm, int timeout_ms) {
  const agent::VmConfig* copy = vm.copy;
  agent::Renewal r;
  r.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  r.entropy.resize(64);
  if (::getrandom(r.entropy.data(), r.entropy.size(), 0) != static_cast<ssize_t>(r.entropy.size()))
    return ErrnoError("getrandom");
  if (copy) {
    r.hostname = copy->hostname;
    if (!copy->address.empty())
      r.net = json{{"address", copy->address}, {"gateway", copy->gateway}, {"prefix", copy->prefix},
                   {"address6", copy->address6}, {"gateway6", copy->gateway6}, {"mac", copy->mac}}.dump();
  }
  if (Status st = agent::RenewBlocking(vm.agent, timeout_ms, r); !st.ok()) return st.error().Wrap("renewing the restored VM");
  if (Status st = agent::SyncBlocking(vm.agent, timeout_ms, agent::SyncMode::kThaw); !st.ok())
    return st.error().Wrap("thawing the restored VM's disk");
  if (vm.grow_to == 0) return OkStatus();
  if (Status st = GrowLoadedDisk(vm.dir, vm.uid, vm.agent, vm.grow_to, timeout_ms); !st.ok())
    return st.error().Wrap("growing the restored VM's disk");
  return OkStatus();
}

Result<bool> GrowDiskFile(const std::string& path, uint64_t bytes, bool now) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat " + path);
  if (static_cast<uint64_t>(st.st_size) >= bytes) return false;
  if (now && ::truncate(path.c_str(), static_cast<off_t>(bytes)) != 0) return ErrnoError("grow " + path);
  return true;
}

Status CopyTemplateDisk(const std::string& from, const std::string& to, uint64_t disk_bytes, const std::string& id) {
  struct stat st;
  if (::stat(from.c_str(), &st) != 0) return ErrnoError("stat " + from);
  if (static_cast<uint64_t>(st.st_size) > disk_bytes)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + "'s disk (" + std::to_string(disk_bytes >> 20) +
                                                    " MiB) is smaller than its memory template's (" +
                                                    std::to_string(st.st_size >> 20) +
                                                    " MiB), whose files it starts on: give it a disk_mb of at least that");
  auto copied = CopyDisk(from, to);
  if (!copied.ok()) return copied.error();
  return OkStatus();
}

std::string WhyNotLoad(const Result<SavedShape>& shape, int cpus, uint64_t memory_mb, bool link, bool disks) {
  if (!shape.ok()) return shape.error().message;
  if (shape->memory_mb != memory_mb || shape->cpus != cpus)
    return "its resources (" + std::to_string(cpus) + " vCPUs, " + std::to_string(memory_mb) +
           " MiB) are not its template's (" + std::to_string(shape->cpus) + ", " + std::to_string(shape->memory_mb) + ")";
  if (shape->tap != link) return link ? "its template had no network" : "its template had a network";
  if (disks) return "it has disks, and a saved VM has no shared folders";
  return "";
}

Status GrowLoadedDisk(const std::string& vm_dir, uid_t uid, const agent::Dialer& agent, uint64_t bytes,
                      int timeout_ms) {
  // A template's agent from before the feature would take the request for a plain sync.
  SBX_RETURN_IF_ERROR(agent::RequireFeature(agent, "grow_disk", timeout_ms));
  SBX_ASSIGN_OR_RETURN(Qmp q, Qmp::Connect(vm_dir, kMonitor, uid, timeout_ms));
  q.set_deadline_ms(timeout_ms);
  if (auto r = q.Execute("block_resize", {{"device", kOwnDrive}, {"size", bytes}}); !r.ok())
    return r.error().Wrap("growing the VM's disk");
  return agent::GrowDiskBlocking(agent, timeout_ms, bytes);
}

}  // namespace sbx::runtime::microvm
