#include "walls.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "base/fs.h"
#include "base/log.h"
#include "base/reaper.h"
#include "runtime/container/criu_probe.h"

namespace sbx {
namespace {

std::string CacheDir() {
  const char* cache = std::getenv("SBX_CACHE_DIR");
  return cache && *cache ? cache : "/var/cache/sbx";
}

// `name` in each folder of PATH.
std::vector<std::string> OnPath(const std::string& name) {
  std::vector<std::string> out;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    if (end > start) out.push_back(dirs.substr(start, end - start) + "/" + name);
    start = end + 1;
  }
  return out;
}

}  // namespace

// The CRIU for hibernate: --criu's, or the first of the set-up's build and those on PATH
// that passes `criu check`; either way only one that can checkpoint a test process here
// (runtime/container/criu_probe.h). None: hibernate is off, and the log says why.
Result<std::string> FindCriu(const std::string& flag) {
  if (flag == "none") return std::string();
  if (!flag.empty()) {
    if (::access(flag.c_str(), X_OK) != 0) return ErrnoError("--criu " + flag + " is not an executable");
    if (Status st = runtime::CriuCanCheckpoint(flag); !st.ok()) {
      SBX_LOG(kWarn) << "hibernate is off: CRIU at " << flag << " cannot checkpoint on this kernel: "
                        << st.error().message;
      return std::string();
    }
    return flag;
  }
  std::vector<std::string> candidates = {CacheDir() + "/criu/criu"};
  for (auto& c : OnPath("criu")) candidates.push_back(std::move(c));
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), X_OK) != 0) continue;
    auto r = Reaper::Get().Run({c, "check"});
    if (!r.ok() || r->exit_code != 0) {
      SBX_LOG(kInfo) << "not using " << c << " for hibernate: `criu check` failed"
                     << (r.ok() ? ": " + r->output.substr(0, 200) : ": " + r.error().message);
      continue;
    }
    Status st = runtime::CriuCanCheckpoint(c);
    if (st.ok()) return c;
    SBX_LOG(kWarn) << "not using " << c << " for hibernate: it cannot checkpoint on this kernel: "
                      << st.error().message;
  }
  return std::string();
}

std::string FindRunsc(const std::string& flag) {
  if (flag == "none") {
    SBX_LOG(kInfo) << "isolation gvisor: off (--runsc none)";
    return "";
  }
  std::vector<std::string> candidates;
  if (!flag.empty()) {
    candidates = {flag};
  } else {
    candidates = {CacheDir() + "/runsc/runsc"};
    for (auto& c : OnPath("runsc")) candidates.push_back(std::move(c));
  }
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), X_OK) != 0) continue;
    auto r = Reaper::Get().Run({c, "--version"}, "", 0, nullptr, 10000);
    if (!r.ok() || r->exit_code != 0) {
      SBX_LOG(kWarn) << "not using " << c << " for isolation gvisor: `runsc --version` failed";
      continue;
    }
    std::string version = r->output.substr(0, r->output.find('\n'));
    SBX_LOG(kInfo) << "isolation gvisor: " << c << " (" << version << ")";
    return c;
  }
  SBX_LOG(kInfo) << "isolation gvisor: off (no runsc" << (flag.empty() ? " found" : " at " + flag) << ")";
  return "";
}

Result<std::unique_ptr<runtime::Runtime>> OpenMicrovm(const std::string& qemu_flag, const std::string& kernel_flag,
                                                     runtime::MicrovmOptions o) {
  if (o.accel != "auto" && o.accel != "kvm" && o.accel != "tcg")
    return MakeError(Code::kInvalidArgument, "--microvm-accel wants auto, kvm or tcg");
  if (o.channel != "auto" && o.channel != "vsock" && o.channel != "serial")
    return MakeError(Code::kInvalidArgument, "--microvm-channel wants auto, vsock or serial");
  if (qemu_flag == "none") {
    SBX_LOG(kInfo) << "isolation microvm: off (--qemu none)";
    return std::unique_ptr<runtime::Runtime>();
  }
  std::vector<std::string> candidates = qemu_flag.empty() ? OnPath("qemu-system-x86_64") : std::vector{qemu_flag};
  o.qemu.clear();
  for (const auto& c : candidates)
    if (::access(c.c_str(), X_OK) == 0) {
      o.qemu = c;
      break;
    }
  if (o.qemu.empty()) {
    SBX_LOG(kInfo) << "isolation microvm: off (no QEMU" << (qemu_flag.empty() ? " on PATH" : " at " + qemu_flag) << ")";
    return std::unique_ptr<runtime::Runtime>();
  }
  o.kernel_dir = kernel_flag;
  if (o.kernel_dir.empty()) {
    // The newest kernel release the set-up made (scripts/vm/guest.sh).
    auto releases = fs::ListDir(CacheDir() + "/vm/guest");
    if (releases.ok()) {
      std::sort(releases->begin(), releases->end());
      for (auto it = releases->rbegin(); it != releases->rend(); ++it)
        if (fs::Exists(CacheDir() + "/vm/guest/" + *it + "/.complete")) {
          o.kernel_dir = CacheDir() + "/vm/guest/" + *it;
          break;
        }
    }
    if (o.kernel_dir.empty()) {
      SBX_LOG(kInfo) << "isolation microvm: off (no guest kernel in " << CacheDir()
                     << "/vm/guest: scripts/vm/guest.sh makes one)";
      return std::unique_ptr<runtime::Runtime>();
    }
  }
  auto rt = runtime::NewMicrovmRuntime(o);
  if (!rt.ok()) return rt.error().Wrap("isolation microvm");
  SBX_LOG(kInfo) << "isolation microvm: " << o.qemu << ", guest kernel " << o.kernel_dir;
  return rt;
}

}  // namespace sbx
