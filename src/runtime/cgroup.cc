#include "runtime/cgroup.h"

#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "base/fs.h"
#include "base/unique_fd.h"

namespace sbx::runtime {
namespace {
// cpuacct (CPU time, for idle policies) only where the host mounts it; looked up once per
// hierarchy root, not on every cgroup operation.
const std::vector<std::string>& V1Controllers(const std::string& root) {
  static const std::vector<std::string> with = {"memory", "cpu", "pids", "freezer", "cpuacct"};
  static const std::vector<std::string> without = {"memory", "cpu", "pids", "freezer"};
  static std::mutex mu;
  static std::map<std::string, bool> has_cpuacct;
  std::lock_guard<std::mutex> lock(mu);
  auto it = has_cpuacct.find(root);
  if (it == has_cpuacct.end()) it = has_cpuacct.emplace(root, fs::IsDir(root + "/cpuacct")).first;
  return it->second ? with : without;
}
}

Status FavorDynamicCgroups(const std::string& dir) {
  if (fs::IsMountPoint(dir)) return OkStatus();
  SBX_RETURN_IF_ERROR(fs::MkdirAll(dir, 0700));
  // A hierarchy of no controller, named: it only sets the option (and shares itself
  // with any other daemon's mount of the same name).
  if (::mount("cgroup", dir.c_str(), "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "none,name=sbx-favor,favordynmods") != 0)
    return ErrnoError("mount a favordynmods cgroup hierarchy at " + dir);
  return OkStatus();
}

CgroupMode DetectCgroupMode(const std::string& root) {
  if (fs::Exists(root + "/memory/memory.limit_in_bytes") && fs::Exists(root + "/pids") &&
      fs::Exists(root + "/freezer"))
    return CgroupMode::kV1;
  auto c = fs::ReadFile(root + "/cgroup.controllers");
  if (c.ok() && c->find("memory") != std::string::npos) return CgroupMode::kV2;
  return CgroupMode::kNone;
}

CgroupDir::CgroupDir(CgroupMode mode, std::string group, std::string root)
    : mode_(mode), group_(std::move(group)), root_(std::move(root)) {}

std::string CgroupDir::Dir(const char* controller) const {
  if (mode_ == CgroupMode::kV2) return root_ + "/" + group_;
  return root_ + "/" + controller + "/" + group_;
}

std::vector<std::string> CgroupDir::Dirs() const {
  if (mode_ == CgroupMode::kV2) return {root_ + "/" + group_};
  if (mode_ == CgroupMode::kNone) return {};
  std::vector<std::string> out;
  for (const auto& c : V1Controllers(root_)) out.push_back(Dir(c.c_str()));
  return out;
}

bool CgroupDir::Exists() const {
  for (const auto& d : Dirs())
    if (fs::IsDir(d)) return true;
  return false;
}

Status CgroupDir::Create(const CgroupLimits& l) {
  if (mode_ == CgroupMode::kNone)
    return MakeError(Code::kFailedPrecondition, "no usable cgroup hierarchy on this host");
  if (mode_ == CgroupMode::kV2) {
    // Enable the controllers on every level from the root down to the parent.
    std::string path = root_;
    std::stringstream ss(group_);
    std::string part;
    std::vector<std::string> parts;
    while (std::getline(ss, part, '/')) parts.push_back(part);
    for (size_t i = 0; i < parts.size(); ++i) {
      (void)fs::WriteFile(path + "/cgroup.subtree_control", "+memory +cpu +pids", false);
      path += "/" + parts[i];
      SBX_RETURN_IF_ERROR(fs::MkdirAll(path));
    }
    return SetLimits(l);
  }
  for (const auto& c : V1Controllers(root_)) SBX_RETURN_IF_ERROR(fs::MkdirAll(Dir(c.c_str())));
  return SetLimits(l);
}

Status CgroupDir::SetLimits(const CgroupLimits& l) {
  if (mode_ == CgroupMode::kV2) {
    std::string d = Dir("");
    if (l.memory_bytes) {
      SBX_RETURN_IF_ERROR(fs::WriteFile(d + "/memory.max", std::to_string(l.memory_bytes), false));
      (void)fs::WriteFile(d + "/memory.swap.max", "0", false);
    }
    if (l.cpus) SBX_RETURN_IF_ERROR(fs::WriteFile(d + "/cpu.max", std::to_string(l.cpus * 100000) + " 100000", false));
    if (l.pids) SBX_RETURN_IF_ERROR(fs::WriteFile(d + "/pids.max", std::to_string(l.pids), false));
    return OkStatus();
  }
  if (mode_ != CgroupMode::kV1) return MakeError(Code::kFailedPrecondition, "no usable cgroup hierarchy");
  if (l.memory_bytes) {
    std::string m = Dir("memory");
    // With swap accounting the combined limit must stay at or above the memory limit:
    // raise it first when growing, lower it last when shrinking.
    bool memsw = fs::Exists(m + "/memory.memsw.limit_in_bytes");
    if (memsw) (void)fs::WriteFile(m + "/memory.memsw.limit_in_bytes", "-1", false);
    SBX_RETURN_IF_ERROR(fs::WriteFile(m + "/memory.limit_in_bytes", std::to_string(l.memory_bytes), false));
    if (memsw) (void)fs::WriteFile(m + "/memory.memsw.limit_in_bytes", std::to_string(l.memory_bytes), false);
    (void)fs::WriteFile(m + "/memory.swappiness", "0", false);
  }
  if (l.cpus) {
    std::string c = Dir("cpu");
    SBX_RETURN_IF_ERROR(fs::WriteFile(c + "/cpu.cfs_period_us", "100000", false));
    SBX_RETURN_IF_ERROR(fs::WriteFile(c + "/cpu.cfs_quota_us", std::to_string(l.cpus * 100000), false));
  }
  if (l.pids) SBX_RETURN_IF_ERROR(fs::WriteFile(Dir("pids") + "/pids.max", std::to_string(l.pids), false));
  return OkStatus();
}

Status CgroupDir::AddProcess(pid_t pid) {
  for (const auto& d : Dirs())
    SBX_RETURN_IF_ERROR(fs::WriteFile(d + "/cgroup.procs", std::to_string(pid), false));
  return OkStatus();
}

std::vector<pid_t> CgroupDir::Pids() const {
  std::set<pid_t> pids;
  for (const auto& d : Dirs()) {
    auto s = fs::ReadFile(d + "/cgroup.procs");
    if (!s.ok()) continue;
    std::stringstream ss(*s);
    pid_t p;
    while (ss >> p) pids.insert(p);
  }
  return {pids.begin(), pids.end()};
}

Status CgroupDir::Kill() {
  if (!Exists()) return OkStatus();
  if (mode_ == CgroupMode::kV2 && fs::Exists(Dir("") + "/cgroup.kill")) {
    // Another thread may remove the group between the check and the write (ENOENT, or
    // ENODEV once it is dead): then nothing is left to kill, as on v1.
    if (Status st = fs::WriteFile(Dir("") + "/cgroup.kill", "1", false); !st.ok()) {
      if (!Exists()) return OkStatus();
      return st;
    }
  } else {
    std::string freezer = mode_ == CgroupMode::kV1 ? Dir("freezer") + "/freezer.state"
                                                   : Dir("") + "/cgroup.freeze";
    (void)fs::WriteFile(freezer, mode_ == CgroupMode::kV1 ? "FROZEN" : "1", false);
    for (pid_t p : Pids()) ::kill(p, SIGKILL);
    (void)fs::WriteFile(freezer, mode_ == CgroupMode::kV1 ? "THAWED" : "0", false);
  }
  for (int i = 0; i < 2000; ++i) {
    auto pids = Pids();
    if (pids.empty()) return OkStatus();
    for (pid_t p : pids) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(i < 20 ? 1 : 5));
  }
  return MakeError(Code::kInternal, "processes of cgroup " + group_ + " survived SIGKILL");
}

Status CgroupDir::Freeze() {
  if (mode_ == CgroupMode::kV1) {
    // v1 asks each task to freeze only when FROZEN is written: one that could not stop
    // then (in the kernel, under load) leaves the group FREEZING until a write retries
    // it. So the write is repeated every 100 ms, for up to 5 s in all.
    std::string f = Dir("freezer") + "/freezer.state";
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; std::chrono::steady_clock::now() - start < std::chrono::seconds(5); ++i) {
      if (i % 500 == 0) SBX_RETURN_IF_ERROR(fs::WriteFile(f, "FROZEN", false));
      auto s = fs::ReadFile(f);
      if (!s.ok()) return s.error();
      if (s->rfind("FROZEN", 0) == 0) return OkStatus();
      if (i > 20) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } else if (mode_ == CgroupMode::kV2) {
    SBX_RETURN_IF_ERROR(fs::WriteFile(Dir("") + "/cgroup.freeze", "1", false));
    for (int i = 0; i < 5000; ++i) {
      auto s = fs::ReadFile(Dir("") + "/cgroup.events");
      if (!s.ok()) return s.error();
      if (s->find("frozen 1") != std::string::npos) return OkStatus();
      if (i > 20) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } else {
    return MakeError(Code::kFailedPrecondition, "no cgroup freezer on this host");
  }
  (void)Thaw();
  return MakeError(Code::kUnavailable, "the sandbox did not freeze in time");
}

Status CgroupDir::Thaw() {
  if (mode_ == CgroupMode::kV1) return fs::WriteFile(Dir("freezer") + "/freezer.state", "THAWED", false);
  if (mode_ == CgroupMode::kV2) return fs::WriteFile(Dir("") + "/cgroup.freeze", "0", false);
  return OkStatus();
}

Status CgroupDir::Remove() {
  for (const auto& d : Dirs()) {
    for (int i = 0; i < 200; ++i) {
      if (::rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) return ErrnoError("rmdir " + d);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (i == 199) return ErrnoError("rmdir " + d);
    }
  }
  return OkStatus();
}

uint64_t CgroupDir::MemoryCurrent() const {
  std::string f = mode_ == CgroupMode::kV2 ? Dir("") + "/memory.current"
                                           : Dir("memory") + "/memory.usage_in_bytes";
  auto s = fs::ReadFile(f);
  return s.ok() ? std::strtoull(s->c_str(), nullptr, 10) : 0;
}

uint64_t CgroupDir::AnonymousMemory() const {
  bool v2 = mode_ == CgroupMode::kV2;
  auto s = fs::ReadFile(v2 ? Dir("") + "/memory.stat" : Dir("memory") + "/memory.stat");
  if (!s.ok()) return 0;
  uint64_t sum = 0;
  std::istringstream in(*s);
  std::string key;
  uint64_t value;
  while (in >> key >> value)
    if (key == (v2 ? "anon" : "total_rss") || key == (v2 ? "shmem" : "total_shmem")) sum += value;
  return sum;
}

uint64_t CgroupDir::CpuUsageNs() const {
  if (mode_ == CgroupMode::kV2) {
    auto s = fs::ReadFile(Dir("") + "/cpu.stat");
    if (!s.ok()) return 0;
    auto p = s->find("usage_usec ");
    return p == std::string::npos ? 0 : std::strtoull(s->c_str() + p + 11, nullptr, 10) * 1000;
  }
  auto s = fs::ReadFile(Dir("cpuacct") + "/cpuacct.usage");
  return s.ok() ? std::strtoull(s->c_str(), nullptr, 10) : 0;
}

std::vector<std::string> ListCgroupChildren(CgroupMode mode, const std::string& parent,
                                            const std::string& root) {
  std::set<std::string> out;
  std::vector<std::string> bases;
  if (mode == CgroupMode::kV2) bases = {root + "/" + parent};
  else if (mode == CgroupMode::kV1)
    for (const auto& c : V1Controllers(root)) bases.push_back(root + "/" + c + "/" + parent);
  for (const auto& b : bases) {
    auto l = fs::ListDir(b);
    if (!l.ok()) continue;
    for (const auto& n : *l)
      if (fs::IsDir(b + "/" + n)) out.insert(n);
  }
  return {out.begin(), out.end()};
}

std::optional<std::string> GroupOfPeer(int fd, const std::string& mark) {
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
  struct ucred cr = {};
  socklen_t len = sizeof cr;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.pid <= 0) return std::nullopt;
  int pidfd = -1;
  len = sizeof pidfd;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) {
    // Linux before 6.5 has no SO_PEERPIDFD (Debian 12's 6.1 among them): pin the peer's
    // pid with pidfd_open. That leaves a window SO_PEERPIDFD closes: a peer that exits
    // after connect and whose pid the host hands out again (after a whole wrap of the
    // pid space) before this call.
    if (errno != ENOPROTOOPT) return std::nullopt;
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, cr.pid, 0));
  }
  if (pidfd < 0) return std::nullopt;
  UniqueFd pin(pidfd);
  auto text = fs::ReadFile("/proc/" + std::to_string(cr.pid) + "/cgroup", 1 << 16);
  if (!text.ok()) return std::nullopt;
  std::istringstream in(*text);
  std::string line, id;
  while (std::getline(in, line)) {
    size_t at = line.find(mark);
    if (at == std::string::npos) continue;
    std::string rest = line.substr(at + mark.size());
    std::string this_id = rest.substr(0, rest.find('/'));
    if (!id.empty() && this_id != id) return std::nullopt;  // hierarchies disagree
    id = this_id;
  }
  if (id.empty()) return std::nullopt;
  // Still the same process (not exited, so its pid was not reused) after the read.
  if (::syscall(SYS_pidfd_send_signal, pin.get(), 0, nullptr, 0) != 0) return std::nullopt;
  return id;
}

}  // namespace sbx::runtime
