// `sbx bench`: create-to-ready, exec round trip (HTTP keep-alive) and delete, with
// min/median/p99 over many runs, beside the same work done in the same run by a plain
// fork+exec (the floor) and by peer tools (unshare, bubblewrap, crun) where installed.
#include <spawn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/fs.h"
#include "bench_burst.h"
#include "cli.h"
#include "stats.h"

extern char** environ;

namespace sbx::cli {
namespace {

using nlohmann::json;

struct Row {
  std::string name;
  std::vector<double> ms;
  std::string floor;  // which floor row it is compared to
  std::string note;   // why a peer could not run here
};

// The first line a failing command prints on stderr, for the table.
std::string FirstErrorLine(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const auto& a : argv) cmd += "'" + a + "' ";
  cmd += "2>&1 >/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "";
  char buf[512] = "";
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  pclose(f);
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}


// Runs argv quietly; returns its duration in ms, or -1 if it failed.
double TimeSpawn(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  auto t0 = Clock::now();
  pid_t pid;
  int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int st;
  while (waitpid(pid, &st, 0) < 0) {
  }
  auto t1 = Clock::now();
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  return Ms(t0, t1);
}

bool Have(const char* tool) {
  std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

Row SpawnRow(const std::string& name, const std::vector<std::string>& argv, int runs) {
  Row r{name, {}, "true", ""};
  if (TimeSpawn(argv) < 0) {  // warm-up, and a check that it works here
    r.note = FirstErrorLine(argv);
    return r;
  }
  for (int i = 0; i < runs; ++i) {
    double ms = TimeSpawn(argv);
    if (ms < 0) {
      r.ms.clear();
      return r;
    }
    r.ms.push_back(ms);
  }
  return r;
}

// A minimal OCI bundle (the host's static busybox) for crun; empty on failure.
std::string MakeCrunBundle() {
  char tmpl[] = "/var/tmp/sbx-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return "";
  std::string b = tmpl;
  for (const char* d : {"/rootfs/bin", "/rootfs/proc", "/rootfs/dev", "/rootfs/tmp"})
    if (!fs::MkdirAll(b + d).ok()) return "";
  auto bin = fs::ReadFile("/bin/busybox", 16 << 20);
  if (!bin.ok() || !fs::WriteFile(b + "/rootfs/bin/busybox", *bin, true, 0755).ok()) return "";
  for (const char* a : {"true", "sleep", "sh"})
    if (symlink("busybox", (b + "/rootfs/bin/" + a).c_str()) != 0) return "";
  std::string spec = "cd " + b + " && crun spec >/dev/null 2>&1";
  if (std::system(spec.c_str()) != 0) return "";
  auto text = fs::ReadFile(b + "/config.json");
  if (!text.ok()) return "";
  auto cfg = json::parse(*text, nullptr, false);
  if (cfg.is_discarded()) return "";
  cfg["process"]["terminal"] = false;
  cfg["process"]["args"] = {"/bin/true"};
  cfg["process"]["rlimits"] = json::array();  // this host's root cannot raise rlimits
  cfg["root"]["readonly"] = true;
  if (!fs::WriteFile(b + "/config.json", cfg.dump()).ok()) return "";
  return b;
}

}  // namespace

// gVisor's runsc for its peer rows: $SBX_RUNSC, else the set-up's cached one ("" if none).
std::string FindRunsc() {
  const char* env = std::getenv("SBX_RUNSC");
  const char* cache = std::getenv("SBX_CACHE_DIR");
  std::string p = env && *env ? env : std::string(cache && *cache ? cache : "/var/cache/sbx") + "/runsc/runsc";
  return ::access(p.c_str(), X_OK) == 0 ? p : "";
}

// runsc on the same bundle as crun: run to exit, and exec into a running one.
void RunscRows(const std::string& bundle, int runs, std::vector<Row>* rows) {
  std::string runsc = FindRunsc();
  if (runsc.empty()) {
    rows->push_back(Row{"runsc run /bin/true (create-to-exit)", {}, "true", "no runsc (scripts/install-runsc.sh)"});
    return;
  }
  char tmpl[] = "/var/tmp/sbx-bench-runsc-XXXXXX";
  if (!mkdtemp(tmpl)) return;
  const std::string state = tmpl;
  std::vector<std::string> base = {runsc, "--root", state, "--network", "none", "--ignore-cgroups"};
  std::fprintf(stderr, "measuring runsc...\n");
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = base;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  std::string id = "sbx-bench-gv-" + std::to_string(getpid());
  rows->push_back(SpawnRow("runsc run /bin/true (create-to-exit)", with({"run", "--bundle", bundle, id}), runs));
  auto text = fs::ReadFile(bundle + "/config.json");
  auto cfg = json::parse(text.ok() ? *text : "", nullptr, false);
  if (!cfg.is_discarded()) {
    json sleeping = cfg;
    sleeping["process"]["args"] = {"/bin/sleep", "100000"};
    if (fs::WriteFile(bundle + "/config.json", sleeping.dump()).ok() &&
        TimeSpawn(with({"run", "--detach", "--bundle", bundle, id})) >= 0) {
      rows->push_back(SpawnRow("runsc exec /bin/true into a running sandbox", with({"exec", id, "/bin/true"}), runs));
      TimeSpawn(with({"delete", "--force", id}));
    }
    (void)fs::WriteFile(bundle + "/config.json", cfg.dump());
  }
  (void)fs::RemoveTree(state);
}

int RunBench(const Globals& g, int runs, const std::string& image, const std::string& isolation, bool peers) {
  if (runs < 5) runs = 5;
  std::vector<Row> rows;
  std::fprintf(stderr, "measuring the floor (fork+exec /bin/true)...\n");
  rows.push_back(SpawnRow("host fork+exec /bin/true (floor)", {"/bin/true"}, runs));
  std::string crun_bundle;
  if (peers) {
    if (Have("unshare"))
      rows.push_back(SpawnRow("unshare, 7 namespaces, /bin/true",
                              {"unshare", "--fork", "--pid", "--mount", "--net", "--ipc", "--uts",
                               "--cgroup", "--mount-proc", "/bin/true"}, runs));
    if (Have("bwrap")) {
      std::vector<std::string> bw = {"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                                     "--ro-bind", "/bin", "/bin", "--ro-bind", "/lib", "/lib"};
      if (fs::Exists("/lib64")) bw.insert(bw.end(), {"--ro-bind", "/lib64", "/lib64"});
      bw.insert(bw.end(), {"--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"});
      std::fprintf(stderr, "measuring bubblewrap...\n");
      rows.push_back(SpawnRow("bubblewrap: new sandbox, /bin/true", bw, runs));
    }
    if (Have("crun") && !(crun_bundle = MakeCrunBundle()).empty()) {
      std::fprintf(stderr, "measuring crun...\n");
      rows.push_back(SpawnRow("crun run /bin/true (create-to-exit)",
                              {"crun", "run", "--bundle", crun_bundle, "sbx-bench-run"}, runs));
      // exec into a running container
      auto text = fs::ReadFile(crun_bundle + "/config.json");
      auto cfg = json::parse(text.ok() ? *text : "", nullptr, false);
      std::string id = "sbx-bench-exec-" + std::to_string(getpid());
      if (!cfg.is_discarded()) {
        cfg["process"]["args"] = {"/bin/sleep", "100000"};
        if (fs::WriteFile(crun_bundle + "/config.json", cfg.dump()).ok() &&
            TimeSpawn({"crun", "run", "--detach", "--bundle", crun_bundle, id}) >= 0) {
          rows.push_back(SpawnRow("crun exec /bin/true into a running container",
                                  {"crun", "exec", id, "/bin/true"}, runs));
          TimeSpawn({"crun", "delete", "--force", id});
        }
      }
      if (isolation == "gvisor") {
        cfg["process"]["args"] = {"/bin/true"};
        (void)fs::WriteFile(crun_bundle + "/config.json", cfg.dump());
        RunscRows(crun_bundle, runs, &rows);
      }
      (void)fs::RemoveTree(crun_bundle);
    }
  }

  HttpClient c(g.url, g.api_key);
  json create_body = {{"type", "small"}, {"image", image}, {"no_env", true}, {"ttl_seconds", 600}};
  if (!isolation.empty()) create_body["isolation"] = isolation;
  const std::string wall = isolation.empty() ? "" : ", " + isolation;
  Row create{"sbx create to ready (" + image + wall + ")", {}, "true", ""};
  Row exec{"sbx exec argv true, HTTP keep-alive round trip", {}, "true", ""};
  Row exec_sh{"sbx exec \"true\" via /bin/sh -c", {}, "true", ""};
  Row del{"sbx delete (answer)", {}, "true", ""};
  Row cycle{"sbx create+exec+delete (fresh sandbox per call)", {}, "true", ""};
  std::vector<std::string> ids;
  std::fprintf(stderr, "measuring sbx (%d runs each)...\n", runs);
  auto call = [&](const std::string& m, const std::string& t, const json& body, double* ms) -> std::optional<json> {
    auto t0 = Clock::now();
    auto r = c.Call(m, t, body.is_null() ? "" : body.dump());
    auto t1 = Clock::now();
    if (!r.ok() || r->status >= 300) {
      std::fprintf(stderr, "sbx bench: %s %s: %s\n", m.c_str(), t.c_str(),
                   r.ok() ? ErrorMessage(*r).c_str() : r.error().message.c_str());
      return std::nullopt;
    }
    if (ms) *ms = Ms(t0, t1);
    return json::parse(r->body, nullptr, false);
  };
  // warm-up
  auto w = call("POST", "/v1/sandboxes", create_body, nullptr);
  if (!w) return 1;
  call("DELETE", "/v1/sandboxes/" + (*w)["id"].get<std::string>(), nullptr, nullptr);
  for (int i = 0; i < runs; ++i) {
    double ms;
    auto j = call("POST", "/v1/sandboxes", create_body, &ms);
    if (!j) return 1;
    create.ms.push_back(ms);
    ids.push_back((*j)["id"].get<std::string>());
  }
  std::string id = ids.front();
  json argv_true = {{"cmd", {"true"}}};
  json sh_true = {{"cmd", "true"}};
  call("POST", "/v1/sandboxes/" + id + "/exec", argv_true, nullptr);
  for (int i = 0; i < runs; ++i) {
    double ms;
    auto j = call("POST", "/v1/sandboxes/" + id + "/exec", argv_true, &ms);
    if (!j || (*j)["exit_code"] != 0) return 1;
    exec.ms.push_back(ms);
  }
  for (int i = 0; i < runs; ++i) {
    double ms;
    auto j = call("POST", "/v1/sandboxes/" + id + "/exec", sh_true, &ms);
    if (!j || (*j)["exit_code"] != 0) return 1;
    exec_sh.ms.push_back(ms);
  }
  for (const auto& s : ids) {
    double ms;
    if (!call("DELETE", "/v1/sandboxes/" + s, nullptr, &ms)) return 1;
    del.ms.push_back(ms);
  }
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    auto j = call("POST", "/v1/sandboxes", create_body, nullptr);
    if (!j) return 1;
    std::string sid = (*j)["id"].get<std::string>();
    auto e = call("POST", "/v1/sandboxes/" + sid + "/exec", argv_true, nullptr);
    if (!e || !call("DELETE", "/v1/sandboxes/" + sid, nullptr, nullptr)) return 1;
    cycle.ms.push_back(Ms(t0, Clock::now()));
  }
  // Creates at once: 20 (each answered; the slowest against one alone), then 100 (each
  // answered, or refused at once with 429 by sbxd's limit on creates in flight).
  Row burst20{"sbx 20 creates at once: the slowest answer", {}, "true", ""};
  Row burst100{"sbx 100 creates at once: the slowest answer or refusal", {}, "true", ""};
  std::string burst_note;
  std::fprintf(stderr, "measuring creates at once...\n");
  for (int rep = 0; rep < 3; ++rep) {
    Burst b = BurstCreates(g, create_body, 20);
    if (b.failed || !b.refused_ms.empty()) {
      burst20.note = std::to_string(b.failed) + " failed, " + std::to_string(b.refused_ms.size()) + " refused" +
                     (b.failure.empty() ? "" : ": " + b.failure);
      break;
    }
    burst20.ms.push_back(*std::max_element(b.answered_ms.begin(), b.answered_ms.end()));
  }
  {
    Burst b = BurstCreates(g, create_body, 100);
    std::vector<double> all = b.answered_ms;
    all.insert(all.end(), b.refused_ms.begin(), b.refused_ms.end());
    if (!all.empty()) burst100.ms.push_back(*std::max_element(all.begin(), all.end()));
    char line[256];
    std::snprintf(line, sizeof line, "100 creates at once: %zu made (slowest %.1f ms), %zu refused with 429 (slowest "
                  "refusal %.1f ms), %d failed otherwise%s%s", b.answered_ms.size(),
                  b.answered_ms.empty() ? 0.0 : *std::max_element(b.answered_ms.begin(), b.answered_ms.end()),
                  b.refused_ms.size(), b.refused_ms.empty() ? 0.0 : *std::max_element(b.refused_ms.begin(), b.refused_ms.end()),
                  b.failed, b.failure.empty() ? "" : ": ", b.failure.substr(0, 80).c_str());
    burst_note = line;
  }
  Row from_memory{"sbx create from a memory template to ready (no pool)", {}, "true", ""};
  from_memory.ms = MemoryTemplateCreates(g, isolation, runs, &from_memory.note);
  // Templates: snapshot, create from it (from the warm pool when sbxd has one), fork.
  Row snap{"sbx snapshot (sandbox with a 1 MB file)", {}, "true", ""};
  Row from{"sbx create from template to ready", {}, "true", ""};
  Row fork{"sbx fork (count 1)", {}, "true", ""};
  Row pause{"sbx pause (freeze; a process running inside)", {}, "true", ""};
  Row resume{"sbx resume (thaw)", {}, "true", ""};
  Row wake{"sbx exec true on a paused sandbox (auto-resume)", {}, "true", ""};
  {
    auto src = call("POST", "/v1/sandboxes", create_body, nullptr);
    if (!src) return 1;
    std::string sid = (*src)["id"];
    if (!call("POST", "/v1/sandboxes/" + sid + "/exec", json{{"cmd", "head -c 1048576 /dev/urandom > /tmp/data"}}, nullptr))
      return 1;
    std::string base = "bench-" + std::to_string(getpid());
    for (int i = 0; i < runs; ++i) {
      double ms;
      if (!call("POST", "/v1/sandboxes/" + sid + "/snapshot", json{{"name", base + "-" + std::to_string(i)}}, &ms)) return 1;
      snap.ms.push_back(ms);
    }
    json from_body = {{"type", "small"}, {"from", base + "-0"}, {"no_env", true}, {"ttl_seconds", 600}};
    if (!isolation.empty()) from_body["isolation"] = isolation;
    // Two unmeasured creates let a warm pool learn the template.
    for (int i = 0; i < 2; ++i) {
      auto w2 = call("POST", "/v1/sandboxes", from_body, nullptr);
      if (!w2) return 1;
      call("DELETE", "/v1/sandboxes/" + (*w2)["id"].get<std::string>(), nullptr, nullptr);
    }
    for (int i = 0; i < runs; ++i) {
      double ms;
      auto j = call("POST", "/v1/sandboxes", from_body, &ms);
      if (!j) return 1;
      from.ms.push_back(ms);
      call("DELETE", "/v1/sandboxes/" + (*j)["id"].get<std::string>(), nullptr, nullptr);
      usleep(20000);  // let a pool refill between calls, as between tool calls
    }
    for (int i = 0; i < runs; ++i) {
      double ms;
      auto j = call("POST", "/v1/sandboxes/" + sid + "/fork", json{{"count", 1}}, &ms);
      if (!j) return 1;
      fork.ms.push_back(ms);
      call("DELETE", "/v1/sandboxes/" + (*j)["sandboxes"][0]["id"].get<std::string>(), nullptr, nullptr);
    }
    // Pause and resume with a process at work inside (a shell loop writing a counter).
    if (!call("POST", "/v1/sandboxes/" + sid + "/exec",
              json{{"cmd", "(i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.01; done) >/dev/null 2>&1 &"}},
              nullptr))
      return 1;
    for (int i = 0; i < runs; ++i) {
      double ms;
      if (!call("POST", "/v1/sandboxes/" + sid + "/pause", json{{"mode", "freeze"}}, &ms)) return 1;
      pause.ms.push_back(ms);
      if (!call("POST", "/v1/sandboxes/" + sid + "/resume", json::object(), &ms)) return 1;
      resume.ms.push_back(ms);
    }
    for (int i = 0; i < runs; ++i) {
      double ms;
      if (!call("POST", "/v1/sandboxes/" + sid + "/pause", json{{"mode", "freeze"}}, nullptr)) return 1;
      auto j = call("POST", "/v1/sandboxes/" + sid + "/exec", argv_true, &ms);
      if (!j || (*j)["exit_code"] != 0) return 1;
      wake.ms.push_back(ms);
    }
    call("DELETE", "/v1/sandboxes/" + sid, nullptr, nullptr);
    for (int i = 0; i < runs; ++i) call("DELETE", "/v1/snapshots/" + base + "-" + std::to_string(i), nullptr, nullptr);
  }
  // The agent's toolbox: files, background processes, the port proxy.
  Row fput{"sbx files write 1 MiB (PUT, renamed into place)", {}, "true", ""};
  Row fget{"sbx files read 1 MiB (GET, streamed)", {}, "true", ""};
  Row fstat{"sbx files stat", {}, "true", ""};
  Row pstart{"sbx process start (background, pid answered)", {}, "true", ""};
  Row proxy{"sbx port proxy GET 1 KiB (new connection each)", {}, "true", ""};
  {
    auto box = call("POST", "/v1/sandboxes", create_body, nullptr);
    if (!box) return 1;
    std::string sid = (*box)["id"];
    std::string mib(1 << 20, 'x');
    for (int i = 0; i < runs; ++i) {
      auto t0 = Clock::now();
      auto r = c.Call("PUT", "/v1/sandboxes/" + sid + "/files?path=/tmp/bench.bin", mib);
      if (!r.ok() || r->status != 200) return 1;
      fput.ms.push_back(Ms(t0, Clock::now()));
      t0 = Clock::now();
      r = c.Call("GET", "/v1/sandboxes/" + sid + "/files?path=/tmp/bench.bin", "", "*/*");
      if (!r.ok() || r->status != 200 || r->body.size() != mib.size()) return 1;
      fget.ms.push_back(Ms(t0, Clock::now()));
      double ms;
      if (!call("GET", "/v1/sandboxes/" + sid + "/files/stat?path=/tmp/bench.bin", nullptr, &ms)) return 1;
      fstat.ms.push_back(ms);
    }
    for (int i = 0; i < runs; ++i) {
      double ms;
      auto j = call("POST", "/v1/sandboxes/" + sid + "/processes", json{{"cmd", {"true"}}}, &ms);
      if (!j) return 1;
      pstart.ms.push_back(ms);
    }
    // busybox httpd serves a 1 KiB file on the sandbox's loopback.
    if (!call("POST", "/v1/sandboxes/" + sid + "/exec",
              json{{"cmd", "mkdir -p /www && head -c 1024 /dev/zero > /www/k && (httpd -f -p 127.0.0.1:8080 -h /www >/dev/null 2>&1 &) && sleep 0.2"}},
              nullptr))
      return 1;
    for (int i = 0; i < runs + 1; ++i) {
      HttpClient fresh(g.url, g.api_key);  // the proxy closes each connection after its exchange
      auto t0 = Clock::now();
      auto r = fresh.Call("GET", "/v1/sandboxes/" + sid + "/ports/8080/k", "", "*/*");
      if (!r.ok() || r->status != 200 || r->body.size() != 1024) {
        std::fprintf(stderr, "sbx bench: the port proxy did not answer (is httpd in the image?); skipping that row\n");
        proxy.ms.clear();
        break;
      }
      if (i > 0) proxy.ms.push_back(Ms(t0, Clock::now()));
    }
    call("DELETE", "/v1/sandboxes/" + sid, nullptr, nullptr);
  }
  // sbxd's memory for an exec whose answer is 16 MiB of control bytes on stdout (96 MiB
  // once escaped as JSON): its peak above its resting size before the first such exec.
  Row flood{"sbx exec, 16 MiB of control bytes on stdout (buffered answer)", {}, "true", ""};
  double flood_mb = -1;
  {
    auto metric = [&](const std::string& name) -> double {
      auto r = c.Call("GET", "/metrics", "", "*/*");
      if (!r.ok() || r->status != 200) return -1;
      auto at = r->body.find("\n" + name + " ");
      return at == std::string::npos ? -1 : std::strtod(r->body.c_str() + at + name.size() + 2, nullptr);
    };
    auto box = call("POST", "/v1/sandboxes", create_body, nullptr);
    if (!box) return 1;
    std::string sid = (*box)["id"];
    double rest = metric("process_resident_memory_bytes");
    json cmd = {{"cmd", "head -c 16777216 /dev/zero | tr '\\0' '\\1'"}, {"timeout_seconds", 120}};
    for (int i = 0; i < std::min(runs, 5); ++i) {
      double ms;
      auto j = call("POST", "/v1/sandboxes/" + sid + "/exec", cmd, &ms);
      if (!j || (*j)["exit_code"] != 0) return 1;
      flood.ms.push_back(ms);
    }
    double peak = metric("process_resident_memory_peak_bytes");
    if (rest > 0 && peak > 0) flood_mb = std::max(0.0, peak - rest) / (1 << 20);
    call("DELETE", "/v1/sandboxes/" + sid, nullptr, nullptr);
  }
  rows.push_back(create);
  rows.push_back(burst20);
  rows.push_back(burst100);
  rows.push_back(from);
  rows.push_back(from_memory);
  rows.push_back(snap);
  rows.push_back(fork);
  rows.push_back(pause);
  rows.push_back(resume);
  rows.push_back(wake);
  rows.push_back(exec);
  rows.push_back(exec_sh);
  rows.push_back(del);
  rows.push_back(cycle);
  rows.push_back(fput);
  rows.push_back(fget);
  rows.push_back(fstat);
  rows.push_back(pstart);
  if (!proxy.ms.empty()) rows.push_back(proxy);
  rows.push_back(flood);

  double floor = Pctl(rows.front().ms, 0.5);
  // Every create is compared with bubblewrap's whole run (a new sandbox running /bin/true).
  double bwrap = 0;
  for (const auto& r : rows)
    if (r.name.rfind("bubblewrap", 0) == 0 && !r.ms.empty()) bwrap = Pctl(r.ms, 0.5);
  json out = json::array();
  if (!g.json)
    std::printf("| operation | n | min ms | median ms | p99 ms | x floor | x bubblewrap |\n"
                "|---|--:|--:|--:|--:|--:|--:|\n");
  for (const auto& r : rows) {
    if (r.ms.empty()) {
      if (!g.json)
        std::printf("| %s | 0 | - | - | - | failed here: %s |\n", r.name.c_str(),
                    r.note.empty() ? "not installed" : r.note.c_str());
      continue;
    }
    double mn = *std::min_element(r.ms.begin(), r.ms.end()), med = Pctl(r.ms, 0.5), p99 = Pctl(r.ms, 0.99);
    if (g.json)
      out.push_back({{"operation", r.name}, {"n", r.ms.size()}, {"min_ms", mn}, {"median_ms", med}, {"p99_ms", p99},
                     {"x_floor", floor > 0 ? med / floor : 0}, {"x_bubblewrap", bwrap > 0 ? med / bwrap : 0}});
    else if (bwrap > 0)
      std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.1f | %.2f |\n", r.name.c_str(), r.ms.size(), mn, med, p99,
                  floor > 0 ? med / floor : 0, med / bwrap);
    else
      std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.1f | - |\n", r.name.c_str(), r.ms.size(), mn, med, p99,
                  floor > 0 ? med / floor : 0);
  }
  if (!g.json) {
    const double one = Pctl(create.ms, 0.5);
    if (!burst20.ms.empty() && one > 0)
      std::printf("\n20 creates at once: the slowest answer is %.1fx one create alone (median of %zu bursts)\n",
                  Pctl(burst20.ms, 0.5) / one, burst20.ms.size());
    std::printf("%s\n", burst_note.c_str());
  } else {
    out.push_back({{"operation", "100 creates at once"}, {"summary", burst_note}});
  }
  if (g.json) {
    out.push_back({{"operation", "sbxd peak memory above rest, for the control-byte exec"}, {"mb", flood_mb}});
    std::printf("%s\n", out.dump(1).c_str());
  } else if (flood_mb >= 0) {
    std::printf("\nsbxd's peak memory above its resting size for the control-byte exec: %.1f MB "
                "(16 MiB of output; each stream's JSON is capped at twice the output cap)\n", flood_mb);
  }
  return 0;
}

}  // namespace sbx::cli
