#include "runtime/gvisor/bundle.h"

#include <algorithm>

namespace sbx::runtime::gvisor {

namespace {

// Root's capabilities in the sandbox, as on the container wall (src/agent/init/
// container_init.h: Docker's default set less NET_RAW and MKNOD), and SYS_ADMIN for the
// agent's own set-up, which it drops before it serves (LimitCapabilities). They are the
// user-space kernel's: nothing of the host's.
const char* const kCaps[] = {"CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FOWNER",           "CAP_FSETID",
                             "CAP_KILL",   "CAP_SETGID",       "CAP_SETUID",           "CAP_SETPCAP",
                             "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_SETFCAP", "CAP_AUDIT_WRITE",
                             "CAP_SYS_ADMIN"};

nlohmann::json Mount(const std::string& dest, const std::string& type, const std::string& source,
                     std::vector<std::string> options) {
  return {{"destination", dest}, {"type", type}, {"source", source}, {"options", options}};
}

}  // namespace

// The type's limits as runsc reads them: it sizes gVisor's own memory by the limit, so that
// its kernel, not the host's, ends a process that asks for more (the sandbox lives on).
nlohmann::json Resources(const Limits& l) {
  nlohmann::json r = nlohmann::json::object();
  if (l.memory_bytes) r["memory"] = {{"limit", l.memory_bytes}};
  if (l.cpus) r["cpu"] = {{"quota", 100000 * l.cpus}, {"period", 100000}};
  if (l.pids) r["pids"] = {{"limit", l.pids}};
  return r;
}

nlohmann::json BundleSpec(const GvisorOptions& o, const StartSpec& spec, const std::string& cgroup) {
  nlohmann::json caps = nlohmann::json::array();
  for (const char* c : kCaps) caps.push_back(c);
  // /tmp and /dev/shm hold half of the sandbox's memory at most, as on the container wall.
  const std::string tmp_size = "size=" + std::to_string(spec.limits.memory_bytes ? spec.limits.memory_bytes / 2 : 1ull << 30);
  nlohmann::json mounts = nlohmann::json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev", "hidepid=2"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", tmp_size}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      Mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777", tmp_size}),
      Mount("/run", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=755", "size=16777216"}),
      Mount(kCtlInside, "bind", CtlOf(spec.dir), {"rbind", "rw", "nosuid", "nodev", "noexec"}),
  });
  if (!o.api_dir.empty()) mounts.push_back(Mount(kApiInside, "bind", o.api_dir, {"rbind", "ro", "nosuid", "nodev"}));
  // Disks: the host folders sbxd mounted for them.
  for (const auto& b : spec.binds) mounts.push_back(Mount(b.target, "bind", b.source, {"rbind", "rw", "nosuid", "nodev"}));

  // The network namespace sbxd made (runsc runs in it too): gVisor's network stack takes
  // its links when the sandbox starts.
  nlohmann::json ns = nlohmann::json::array({{{"type", "pid"}},
                                             {{"type", "ipc"}},
                                             {{"type", "uts"}},
                                             {{"type", "mount"}},
                                             {{"type", "user"}},
                                             {{"type", "network"}, {"path", NetnsOf(spec.dir)}}});
  nlohmann::json map = nlohmann::json::array({{{"containerID", 0}, {"hostID", o.uid_base}, {"size", o.uid_count}}});
  const uint64_t nofile = o.max_open_files;
  return {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"user", {{"uid", 0}, {"gid", 0}}},
        {"args", {std::string(kApiInside) + "/" + o.agent_copy, "--gvisor-init", kCtlInside}},
        {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
        {"cwd", "/"},
        {"capabilities", {{"bounding", caps}, {"effective", caps}, {"permitted", caps}}},
        {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", nofile}, {"soft", std::min<uint64_t>(nofile, 1024)}}}},
        {"noNewPrivileges", false}}},
      {"root", {{"path", RootOf(spec.dir)}, {"readonly", false}}},
      {"hostname", spec.hostname},
      {"mounts", mounts},
      {"linux", {{"namespaces", ns}, {"uidMappings", map}, {"gidMappings", map}, {"cgroupsPath", cgroup},
                 {"resources", Resources(spec.limits)}}},
  };
}

std::string AgentInit(const GvisorOptions& o, const StartSpec& spec) {
  return nlohmann::json{{"nameserver", spec.nameserver}, {"no_new_privs", spec.no_new_privs}, {"id_count", o.uid_count}}
      .dump();
}

}  // namespace sbx::runtime::gvisor
