// `sbx bench hibernate`: pause mode hibernate (a CRIU checkpoint of the whole sandbox) and
// its restore, for a sandbox whose python3 holds about 100 MB of Python objects; the
// sandbox's resident memory before and after, and the checkpoint's size. The floor, in
// the same run: CRIU itself dumping and restoring the same python3 program running on the
// host in a pid namespace of its own (no sandbox, no sbxd). Freeze and thaw of the same
// sandbox are shown too.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/fs.h"
#include "base/ids.h"
#include "cli.h"
#include "stats.h"

namespace sbx::cli {
namespace {

using nlohmann::json;
double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// About 100 MB of Python objects (1.6 million small strings in a list), then a file that
// says it is ready, then sleep.
constexpr const char* kHolder =
    "import time\n"
    "x = [str(i) * 3 for i in range(1600000)]\n"
    "open('/tmp/holder-ready', 'w').close()\n"
    "time.sleep(1e9)\n";

// Resident memory charged to the sandbox's cgroup, in MB (-1 if unknown): anonymous
// memory, and on the gVisor wall the sentry's memory file too (shared memory).
double CgroupRssMb(const std::string& data_dir, const std::string& id, const std::string& isolation) {
  std::error_code ec;
  std::string real = std::filesystem::weakly_canonical(data_dir, ec).string();
  std::string parent = "sbx-" + Sha256Hex(ec ? data_dir : real).substr(0, 8) + (isolation == "gvisor" ? "-gvisor" : "");
  auto value = [](const std::string& text, const std::string& key) -> double {
    size_t at = text.rfind(key + " ", 0) == 0 ? 0 : text.find("\n" + key + " ");
    if (at == std::string::npos) return -1;
    if (at > 0) ++at;
    return std::stod(text.substr(at + key.size() + 1)) / 1048576.0;
  };
  if (auto v1 = fs::ReadFile("/sys/fs/cgroup/memory/" + parent + "/" + id + "/memory.stat"); v1.ok()) {
    double rss = value(*v1, "total_rss");
    return isolation == "gvisor" && rss >= 0 ? rss + std::max(0.0, value(*v1, "total_shmem")) : rss;
  }
  if (auto v2 = fs::ReadFile("/sys/fs/cgroup/" + parent + "/" + id + "/memory.stat"); v2.ok()) {
    double anon = value(*v2, "anon");
    return isolation == "gvisor" && anon >= 0 ? anon + std::max(0.0, value(*v2, "shmem")) : anon;
  }
  // A hibernated gVisor sandbox has no cgroup at all: nothing of it is resident.
  if (isolation == "gvisor" && fs::Exists(data_dir + "/hibernated/" + id)) return 0;
  return -1;
}

// CRIU on the same program on the host: python3 as the init of its own pid namespace
// (unshare --pid --fork setsid), dumped and restored `runs` times. Empty if CRIU fails.
std::pair<std::vector<double>, std::vector<double>> CriuFloor(const std::string& criu, int runs, double* size_mb) {
  std::vector<double> dumps, restores;
  char tmpl[] = "/var/tmp/sbx-bench-criu.XXXXXX";
  if (!mkdtemp(tmpl)) return {};
  std::string dir = tmpl, prog = dir + "/holder.py";
  std::string code = kHolder;
  size_t at = code.find("/tmp/holder-ready");
  code.replace(at, 17, dir + "/ready");
  if (!fs::WriteFile(prog, code).ok()) return {};
  pid_t u = fork();
  if (u == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    ::syscall(SYS_close_range, 3, ~0U, 0);  // nothing of this process (its HTTP socket) goes along
    execlp("unshare", "unshare", "--pid", "--fork", "setsid", "/usr/bin/python3", prog.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 300 && !fs::Exists(dir + "/ready"); ++i) usleep(100000);
  // The pid namespace's init: unshare's only child.
  pid_t pid = 0;
  auto kids = fs::ReadFile("/proc/" + std::to_string(u) + "/task/" + std::to_string(u) + "/children");
  if (kids.ok()) pid = std::atoi(kids->c_str());
  std::string img = dir + "/img";
  for (int i = 0; pid > 0 && i < runs; ++i) {
    (void)fs::RemoveTree(img);
    (void)fs::MkdirAll(img, 0700);
    auto t0 = Clock::now();
    std::string d = criu + " dump -t " + std::to_string(pid) + " -D " + img + " -o dump.log 2>/dev/null";
    if (std::system(d.c_str()) != 0) break;
    dumps.push_back(Ms(t0, Clock::now()));
    if (i == 0) waitpid(u, nullptr, 0);  // unshare ends with the dumped tree
    *size_mb = fs::TreeSize(img) / 1048576.0;
    t0 = Clock::now();
    std::string r = criu + " restore -d -D " + img + " -o restore.log --pidfile " + img + "/pid 2>/dev/null";
    if (std::system(r.c_str()) != 0) break;
    restores.push_back(Ms(t0, Clock::now()));
    auto p = fs::ReadFile(img + "/pid");
    pid = p.ok() ? std::atoi(p->c_str()) : 0;
  }
  if (pid > 0) kill(pid, SIGKILL);
  if (dumps.empty()) kill(u, SIGKILL), waitpid(u, nullptr, 0);
  (void)fs::RemoveTree(dir);
  return {dumps, restores};
}

}  // namespace

int RunBenchHibernate(const Globals& g, int runs, const std::string& data_dir, const std::string& criu,
                      const std::string& isolation) {
  HttpClient c(g.url, g.api_key);
  auto call = [&](const std::string& m, const std::string& t, const json& body, double* ms) -> std::optional<json> {
    auto t0 = Clock::now();
    auto r = c.Call(m, t, body.is_null() ? "" : body.dump());
    if (ms) *ms = Ms(t0, Clock::now());
    if (!r.ok() || r->status >= 300) {
      std::fprintf(stderr, "sbx bench hibernate: %s %s: %s\n", m.c_str(), t.c_str(),
                   r.ok() ? r->body.c_str() : r.error().message.c_str());
      return std::nullopt;
    }
    return json::parse(r->body, nullptr, false);
  };
  json body = {{"image", "default"}, {"type", "small"}, {"no_env", true}, {"ttl_seconds", 3600}};
  if (!isolation.empty()) body["isolation"] = isolation;
  auto sb = call("POST", "/v1/sandboxes", body, nullptr);
  if (!sb) return 1;
  std::string id = (*sb)["id"];
  std::string base = "/v1/sandboxes/" + id;
  auto done = [&](int rc) {
    call("DELETE", base, nullptr, nullptr);
    return rc;
  };
  std::fprintf(stderr, "sandbox %s: a python3 holding about 100 MB of objects...\n", id.c_str());
  json start = {{"cmd", {"sh", "-c", std::string("cat > /tmp/holder.py <<'EOF'\n") + kHolder +
                                         "EOF\n(python3 /tmp/holder.py >/dev/null 2>&1 &)"}}};
  if (!call("POST", base + "/exec", start, nullptr)) return done(1);
  json ready = {{"cmd", {"sh", "-c", "for i in $(seq 300); do [ -e /tmp/holder-ready ] && exit 0; sleep 0.1; done; exit 1"}},
                {"timeout_seconds", 60}};
  auto r = call("POST", base + "/exec", ready, nullptr);
  if (!r || (*r)["exit_code"] != 0) return done(1);
  json alive = {{"cmd", {"sh", "-c", "for f in /proc/[0-9]*/cmdline; do grep -q holder.py $f 2>/dev/null && exit 0; done; exit 1"}}};
  std::vector<double> hib, res, freeze, thaw, rss_before, rss_after, size;
  for (int i = 0; i < runs; ++i) {
    double ms;
    rss_before.push_back(CgroupRssMb(data_dir, id, isolation));
    if (!call("POST", base + "/pause", json{{"mode", "hibernate"}}, &ms)) return done(1);
    hib.push_back(ms);
    rss_after.push_back(CgroupRssMb(data_dir, id, isolation));
    size.push_back(fs::TreeSize(data_dir + "/hibernated/" + id) / 1048576.0);
    if (!call("POST", base + "/resume", json::object(), &ms)) return done(1);
    res.push_back(ms);
    auto a = call("POST", base + "/exec", alive, nullptr);
    if (!a || (*a)["exit_code"] != 0) {
      std::fprintf(stderr, "sbx bench hibernate: the python3 did not survive a restore\n");
      return done(1);
    }
  }
  for (int i = 0; i < runs; ++i) {
    double ms;
    if (!call("POST", base + "/pause", json{{"mode", "freeze"}}, &ms)) return done(1);
    freeze.push_back(ms);
    if (!call("POST", base + "/resume", json::object(), &ms)) return done(1);
    thaw.push_back(ms);
  }
  done(0);
  double floor_size = 0;
  std::vector<double> fd, fr;
  // CRIU is the container wall's floor; the other walls' rows stand alone.
  if (!criu.empty() && (isolation.empty() || isolation == "container")) {
    std::fprintf(stderr, "the floor: CRIU on the same program on the host...\n");
    std::tie(fd, fr) = CriuFloor(criu, runs, &floor_size);
  }
  double fd_med = Median(fd), fr_med = Median(fr);
  std::printf("| %d runs | n | median ms | max ms | x floor |\n|---|--:|--:|--:|--:|\n", runs);
  auto row = [&](const char* name, const std::vector<double>& v, double floor) {
    if (v.empty()) {
      std::printf("| %s | 0 | - | - | - |\n", name);
      return;
    }
    if (floor > 0)
      std::printf("| %s | %zu | %.1f | %.1f | %.2f |\n", name, v.size(), Median(v), Max(v), Median(v) / floor);
    else
      std::printf("| %s | %zu | %.1f | %.1f | - |\n", name, v.size(), Median(v), Max(v));
  };
  row("sbx pause mode hibernate (checkpoint to disk)", hib, fd_med);
  row("sbx resume of a hibernated sandbox (restore)", res, fr_med);
  row("floor: criu dump, same python3 on the host", fd, 0);
  row("floor: criu restore -d, same python3 on the host", fr, 0);
  row("sbx pause mode freeze (same sandbox)", freeze, 0);
  row("sbx resume (thaw)", thaw, 0);
  std::printf("\n| memory | median MB |\n|---|--:|\n");
  std::printf("| sandbox resident (cgroup%s) while running | %.1f |\n", isolation == "gvisor" ? " anon + shmem" : " anon",
              Median(rss_before));
  std::printf("| sandbox resident while hibernated (RAM per hibernated sandbox) | %.1f |\n", Median(rss_after));
  std::printf("| checkpoint on disk | %.1f |\n", Median(size));
  if (floor_size > 0) std::printf("| floor: CRIU image of the same python3 | %.1f |\n", floor_size);
  return 0;
}

}  // namespace sbx::cli
