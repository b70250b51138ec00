// sbx: the command-line client. Wiring only: parses arguments, calls the HTTP API, prints.
#include <cctype>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "cli.h"
#include "http_client.h"

using nlohmann::json;
using namespace sbx;
using namespace sbx::cli;

namespace {

std::string DefaultKey(const std::string& data_dir) {
  if (const char* k = std::getenv("SBX_API_KEY"); k && *k) return k;
  auto f = fs::ReadFile(data_dir + "/api-key", 4096);
  if (!f.ok()) return "";
  std::string k = *f;
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
  return k;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "sbx: %s\n", msg.c_str());
  return 1;
}

std::string Str(const json& j, const char* k) {
  return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "-";
}

// For query values: everything but unreserved characters as %XX ("+" in offsets too).
std::string PercentEncode(const std::string& v) {
  std::string out;
  for (unsigned char ch : v) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

// "ID:/path" -> (ID, /path); a local path -> nullopt.
std::optional<std::pair<std::string, std::string>> RemoteSide(const std::string& s) {
  size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || s.find('/') < colon) return std::nullopt;
  return std::make_pair(s.substr(0, colon), s.substr(colon + 1));
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string BaseName(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// Runs tar (argv) and returns its exit status.
int RunTar(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// sbx cp: a file goes through the files API, a folder as one tar through the archive
// API. Downloads of folders are unpacked by the host's GNU tar, which refuses absolute
// and ".." names and creates links last, so a hostile sandbox's tar cannot write outside.
int CopyFiles(HttpClient& c, const std::string& src, const std::string& dst) {
  auto rs = RemoteSide(src), rd = RemoteSide(dst);
  if (rs.has_value() == rd.has_value()) return Fail("cp copies between this machine and a sandbox: exactly one side is ID:/path");
  char tmpl[] = "/tmp/sbx-cp-XXXXXX";
  if (rd) {
    auto [id, path] = *rd;
    if (path.empty() || path[0] != '/') return Fail("the sandbox path must be absolute: " + dst);
    if (!IsDir(src)) {
      // Into an existing folder: keep the file's name.
      auto st = c.Call("GET", "/v1/sandboxes/" + id + "/files/stat?path=" + PercentEncode(path));
      if (st.ok() && st->status == 200) {
        auto j = json::parse(st->body, nullptr, false);
        if (j.is_object() && j.value("type", "") == "dir") path += (path.back() == '/' ? "" : "/") + BaseName(src);
      }
      auto r = c.Upload("/v1/sandboxes/" + id + "/files?path=" + PercentEncode(path), src, nullptr, "PUT");
      if (auto why = FailureOf(r)) return Fail(*why);
      return 0;
    }
    int fd = mkstemp(tmpl);
    if (fd < 0) return Fail("cannot create a temporary file");
    close(fd);
    std::string tmp = tmpl;
    int rc = RunTar({"tar", "-C", src, "-cf", tmp, "."});
    if (rc != 0) {
      unlink(tmp.c_str());
      return Fail("tar of " + src + " failed");
    }
    auto r = c.Upload("/v1/sandboxes/" + id + "/archive?path=" + PercentEncode(path), tmp, nullptr, "PUT");
    unlink(tmp.c_str());
    if (auto why = FailureOf(r)) return Fail(*why);
    return 0;
  }
  auto [id, path] = *rs;
  auto st = CallJson(c, "GET", "/v1/sandboxes/" + id + "/files/stat?path=" + PercentEncode(path));
  if (!st) return 1;
  bool dir = st->value("type", "") == "dir";
  if (!dir) {
    std::string target = IsDir(dst) ? dst + "/" + BaseName(path) : dst;
    auto r = c.Call("GET", "/v1/sandboxes/" + id + "/files?path=" + PercentEncode(path), "", "*/*");
    if (auto why = FailureOf(r)) return Fail(*why);
    std::string part = target + ".sbx-part";
    FILE* f = std::fopen(part.c_str(), "wb");
    if (!f) return Fail("cannot write " + target);
    bool ok = std::fwrite(r->body.data(), 1, r->body.size(), f) == r->body.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(part.c_str(), target.c_str()) != 0) {
      unlink(part.c_str());
      return Fail("cannot write " + target);
    }
    return 0;
  }
  auto r = c.Call("GET", "/v1/sandboxes/" + id + "/archive?path=" + PercentEncode(path), "", "*/*");
  if (auto why = FailureOf(r)) return Fail(*why);
  int fd = mkstemp(tmpl);
  if (fd < 0) return Fail("cannot create a temporary file");
  bool ok = write(fd, r->body.data(), r->body.size()) == static_cast<ssize_t>(r->body.size());
  close(fd);
  std::string tmp = tmpl;
  if (!IsDir(dst) && mkdir(dst.c_str(), 0755) != 0) ok = false;
  int rc = ok ? RunTar({"tar", "-C", dst, "-xf", tmp, "--no-same-owner", "--no-same-permissions"}) : -1;
  unlink(tmp.c_str());
  if (rc != 0) return Fail("unpacking into " + dst + " failed");
  return 0;
}

void PrintSandboxes(const json& list) {
  std::printf("%-20s %-16s %-9s %-8s %-10s %-21s %s\n", "ID", "NAME", "STATE", "TYPE", "IMAGE",
              "CREATED", "EXPIRES");
  for (const auto& s : list)
    std::printf("%-20s %-16s %-9s %-8s %-10s %-21s %s\n", Str(s, "id").c_str(), Str(s, "name").c_str(),
                Str(s, "state").c_str(), Str(s, "type").c_str(), Str(s, "image").c_str(),
                Str(s, "created_at").c_str(), Str(s, "expires_at").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sbx: run AI agents' tool calls in isolated sandboxes"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--json, --url) may follow the subcommand
  Globals g;
  std::string data_dir = "/var/lib/sbx";
  g.url = std::getenv("SBX_URL") ? std::getenv("SBX_URL") : "http://127.0.0.1:7070";
  app.add_option("--url", g.url, "sbxd address (env SBX_URL)");
  app.add_option("--data-dir", data_dir, "where to find the admin key when SBX_API_KEY is unset");
  app.add_flag("--json", g.json, "print JSON for scripts");
  bool raw_output = false;
  app.add_flag("--raw-output", raw_output,
               "write sandbox output to a terminal as it is, escape sequences included (default: shown as text)");

  auto* create = app.add_subcommand("create", "create a sandbox and wait until it is ready");
  std::string type = "small", image, from, name;
  int64_t ttl = 0, memory_mb = 0, idle = 0;
  std::string ttl_action;
  int cpus = 0, pids = 0;
  bool no_env = false;
  std::vector<std::string> env_kv, md_kv;
  create->add_option("--type", type, "small, default or large");
  create->add_option("--image", image, "image to start from (default: default)");
  create->add_option("--from", from, "named snapshot to start from");
  create->add_option("--ttl", ttl, "seconds until it stops by itself (default 3600)");
  create->add_option("--ttl-action", ttl_action, "what the TTL does: stop (default) or pause");
  create->add_option("--idle-timeout", idle, "pause it after this many idle seconds (0: never)");
  create->add_flag("--no-env", no_env, "inject none of the daemon's secrets");
  create->add_option("--name", name, "a unique name");
  create->add_option("--env,-e", env_kv, "KEY=VALUE");
  create->add_option("--metadata,-m", md_kv, "KEY=VALUE");
  create->add_option("--memory-mb", memory_mb, "override the type's memory");
  create->add_option("--cpus", cpus, "override the type's vCPUs");
  create->add_option("--pids", pids, "override the type's process limit");

  auto* exec = app.add_subcommand("exec", "run a command in a sandbox, streaming its output");
  std::string exec_id, cwd;
  int64_t timeout = 60;
  std::vector<std::string> cmd, exec_env;
  exec->add_option("id", exec_id, "sandbox id")->required();
  exec->add_option("--timeout", timeout, "seconds before the command's tree is killed (default 60)");
  exec->add_option("--cwd", cwd, "working directory");
  exec->add_option("--env,-e", exec_env, "KEY=VALUE");
  bool exec_interactive = false, exec_tty = false;
  exec->add_flag("--interactive,-i", exec_interactive, "attach this terminal's input (with -t: an interactive terminal)");
  exec->add_flag("--tty,-t", exec_tty, "run the command on a pseudo-terminal (use -it for a shell)");
  exec->add_option("cmd", cmd, "the command and its arguments (after --)")->required();

  auto* cp = app.add_subcommand("cp", "copy files or folders into or out of a sandbox (ID:/path names the sandbox side)");
  std::string cp_src, cp_dst;
  cp->add_option("src", cp_src, "a local path or ID:/path")->required();
  cp->add_option("dst", cp_dst, "a local path or ID:/path")->required();

  auto* port = app.add_subcommand("port", "the URLs that reach a port inside a sandbox through sbxd's proxy");
  std::string port_id, proxy_domain = "sbx.localhost";
  int port_num = 0;
  port->add_option("id", port_id, "sandbox id")->required();
  port->add_option("port", port_num, "TCP port inside the sandbox")->required()->check(CLI::Range(1, 65535));
  port->add_option("--proxy-domain", proxy_domain, "sbxd's --proxy-domain (default sbx.localhost)");

  auto* ps = app.add_subcommand("ps", "list a sandbox's background processes");
  std::string ps_id;
  ps->add_option("id", ps_id, "sandbox id")->required();
  auto* spawn = app.add_subcommand("spawn", "start a background process in a sandbox; prints its pid");
  std::string spawn_id, spawn_cwd;
  std::vector<std::string> spawn_cmd;
  spawn->add_option("id", spawn_id, "sandbox id")->required();
  spawn->add_option("--cwd", spawn_cwd, "working directory");
  spawn->add_option("cmd", spawn_cmd, "the command and its arguments (after --)")->required();
  auto* logs = app.add_subcommand("logs", "print a background process's output (from its ring)");
  std::string logs_id;
  int64_t logs_pid = 0;
  uint64_t logs_since = 0;
  bool logs_follow = false;
  logs->add_option("id", logs_id, "sandbox id")->required();
  logs->add_option("pid", logs_pid, "process id")->required();
  logs->add_flag("--follow,-f", logs_follow, "keep printing until the process ends");
  logs->add_option("--since", logs_since, "first sequence number to print");

  auto* ls = app.add_subcommand("ls", "list sandboxes");
  std::string ls_state;
  ls->add_option("--state", ls_state, "only this state");
  auto* get = app.add_subcommand("get", "show one sandbox");
  std::string get_id;
  get->add_option("id", get_id)->required();
  auto* rm = app.add_subcommand("rm", "delete sandboxes");
  std::vector<std::string> rm_ids;
  rm->add_option("ids", rm_ids)->required();
  auto* stop = app.add_subcommand("stop", "stop a sandbox (files kept)");
  auto* start = app.add_subcommand("start", "start a stopped sandbox");
  std::string life_id;
  stop->add_option("id", life_id)->required();
  start->add_option("id", life_id)->required();
  auto* pause = app.add_subcommand("pause", "pause a sandbox (compute not billed until resumed)");
  auto* resume = app.add_subcommand("resume", "resume a paused sandbox");
  std::string pause_mode = "freeze";
  pause->add_option("id", life_id)->required();
  pause->add_option("--mode", pause_mode, "freeze (memory kept, resume in ms) or hibernate (memory to disk)");
  resume->add_option("id", life_id)->required();
  auto* secret = app.add_subcommand("secret", "daemon secrets, injected as env into sandboxes without --no-env");
  secret->require_subcommand(1);
  auto* secret_set = secret->add_subcommand("set", "set NAME from --value or, without it, standard input");
  auto* secret_ls = secret->add_subcommand("ls", "list secret names");
  auto* secret_rm = secret->add_subcommand("rm", "delete secrets");
  std::string secret_name, secret_value;
  bool secret_value_given = false;
  std::vector<std::string> secret_names;
  secret_set->add_option("name", secret_name)->required();
  secret_set->add_option("--value", secret_value, "the value (visible in the process list: prefer stdin)")
      ->each([&](const std::string&) { secret_value_given = true; });
  secret_rm->add_option("names", secret_names)->required();
  auto* usage = app.add_subcommand("usage", "billed seconds and cost per sandbox, per type and in total");
  std::string usage_from, usage_to;
  usage->add_option("--from", usage_from, "start of the window (RFC 3339 or Unix seconds)");
  usage->add_option("--to", usage_to, "end of the window (default: now)");

  auto* snap = app.add_subcommand("snapshot", "capture a sandbox's files as a named snapshot");
  std::string snap_id, snap_name;
  snap->add_option("id", snap_id)->required();
  snap->add_option("name", snap_name)->required();
  auto* fork = app.add_subcommand("fork", "new sandboxes with a copy of a sandbox's files");
  std::string fork_id;
  int fork_count = 1;
  fork->add_option("id", fork_id)->required();
  fork->add_option("--count", fork_count, "how many (default 1)");

  auto* tmpl = app.add_subcommand("template", "templates (named snapshots)");
  tmpl->require_subcommand(1);
  auto* tmpl_build = tmpl->add_subcommand("build", "run steps in a fresh sandbox, then snapshot it as NAME");
  std::string tb_name, tb_image, tb_from, tb_type = "small";
  std::vector<std::string> tb_steps;
  int64_t tb_timeout = 1800;
  tmpl_build->add_option("name", tb_name)->required();
  tmpl_build->add_option("--image", tb_image, "image to start from (default: default)");
  tmpl_build->add_option("--from", tb_from, "snapshot to start from");
  tmpl_build->add_option("--type", tb_type, "sandbox type for the build");
  tmpl_build->add_option("--run", tb_steps, "a step (shell command); repeat for more")->required();
  tmpl_build->add_option("--timeout", tb_timeout, "seconds per step (default 1800)");
  auto* tmpl_ls = tmpl->add_subcommand("ls", "list templates");
  auto* tmpl_rm = tmpl->add_subcommand("rm", "delete templates");
  std::vector<std::string> tmpl_rm_names;
  tmpl_rm->add_option("names", tmpl_rm_names)->required();

  auto* disk = app.add_subcommand("disk", "persistent disks and serverless calls");
  disk->require_subcommand(1);
  auto* disk_create = disk->add_subcommand("create", "create a disk");
  std::string disk_name;
  int64_t disk_size = 1024;
  disk_create->add_option("--name", disk_name, "a unique name");
  disk_create->add_option("--size-mb", disk_size, "size limit in MiB (default 1024)");
  auto* disk_ls = disk->add_subcommand("ls", "list disks");
  auto* disk_rm = disk->add_subcommand("rm", "delete disks");
  std::vector<std::string> disk_rm_ids;
  disk_rm->add_option("ids", disk_rm_ids)->required();
  auto* disk_exec = disk->add_subcommand("exec", "run one command in a fresh sandbox on the disk");
  std::string disk_exec_id;
  std::vector<std::string> disk_cmd;
  int64_t disk_timeout = 300;
  disk_exec->add_option("id", disk_exec_id, "disk id or name")->required();
  disk_exec->add_option("--timeout", disk_timeout, "seconds (at most 300)");
  disk_exec->add_option("cmd", disk_cmd, "the command (after --)")->required();

  auto* img = app.add_subcommand("image", "images");
  img->require_subcommand(1);
  auto* img_ls = img->add_subcommand("ls", "list images");
  auto* img_import = img->add_subcommand("import", "import a rootfs tarball or docker export");
  std::string img_name, img_file;
  img_import->add_option("name", img_name)->required();
  img_import->add_option("file", img_file)->required();
  auto* img_build = img->add_subcommand("build", "build a built-in image (default)");
  std::string build_name, cache_dir = std::getenv("SBX_CACHE_DIR") ? std::getenv("SBX_CACHE_DIR") : "/var/cache/sbx";
  img_build->add_option("name", build_name)->required();
  img_build->add_option("--cache-dir", cache_dir, "where slow artefacts are cached (env SBX_CACHE_DIR)");

  auto* bench = app.add_subcommand("bench", "measure create, exec and delete against peer tools");
  int runs = 50;
  std::string bench_image = "busybox";
  bool no_peers = false;
  auto* bench_patterns = bench->add_subcommand("patterns", "the three tool-call patterns, timed (seed experiment)");
  int pattern_runs = 5;
  bench_patterns->add_option("--runs", pattern_runs, "calls per pattern (default 5)");
  int pattern_gap = 0;
  bench_patterns->add_option("--gap-ms", pattern_gap, "think time before each call (default 0)");
  auto* bench_disk = bench->add_subcommand("disk-exec", "serverless calls on a disk; a test suite against the host");
  int disk_runs = 50;
  bench_disk->add_option("--runs", disk_runs, "calls of `true` (default 50)");
  int disk_gap = 0;
  bench_disk->add_option("--gap-ms", disk_gap, "think time between calls (default 0: back to back)");
  auto* bench_hib = bench->add_subcommand("hibernate", "hibernate and restore a sandbox holding ~100 MB, beside CRIU alone");
  int hib_runs = 10;
  bench_hib->add_option("--runs", hib_runs, "cycles (default 10)");
  std::string hib_criu;
  bench_hib->add_option("--criu", hib_criu, "CRIU binary for the floor (default $SBX_CRIU, else the build cache's)");
  bench->add_option("--runs", runs, "samples per row (default 50)");
  bench->add_option("--image", bench_image, "image for sandboxes (default busybox)");
  bench->add_flag("--no-peers", no_peers, "skip the peer tools");
  auto* health = app.add_subcommand("health", "check that sbxd answers");

  CLI11_PARSE(app, argc, argv);
  const char* raw_env = std::getenv("SBX_RAW_OUTPUT");
  SetRawOutput(raw_output || (raw_env && std::string(raw_env) == "1"));
  g.api_key = DefaultKey(data_dir);
  HttpClient c(g.url, g.api_key);

  if (*health) {
    auto j = CallJson(c, "GET", "/v1/health");
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : ("ok, sbxd " + Str(*j, "version")).c_str());
    return 0;
  }
  if (*create) {
    json body = {{"type", type}, {"no_env", no_env}};
    if (!image.empty()) body["image"] = image;
    if (!from.empty()) body["from"] = from;
    if (!name.empty()) body["name"] = name;
    if (ttl) body["ttl_seconds"] = ttl;
    if (!ttl_action.empty()) body["ttl_action"] = ttl_action;
    if (idle) body["idle_timeout_seconds"] = idle;
    for (auto [list, key] : {std::pair{&env_kv, "env"}, std::pair{&md_kv, "metadata"}}) {
      json m = json::object();
      for (const auto& kv : *list) {
        auto eq = kv.find('=');
        if (eq == std::string::npos) return Fail(std::string("--") + key + " wants KEY=VALUE");
        m[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
      if (!m.empty()) body[key] = m;
    }
    json res = json::object();
    if (memory_mb) res["memory_mb"] = memory_mb;
    if (cpus) res["cpus"] = cpus;
    if (pids) res["pids"] = pids;
    if (!res.empty()) body["resources"] = res;
    auto j = CallJson(c, "POST", "/v1/sandboxes", body);
    if (!j) return 1;
    if (g.json) std::printf("%s\n", j->dump().c_str());
    else std::printf("%s\n", Str(*j, "id").c_str());
    return 0;
  }
  if (*exec) {
    json body = {{"cmd", cmd}, {"timeout_seconds", timeout}};
    if (!cwd.empty()) body["cwd"] = cwd;
    json e = json::object();
    for (const auto& kv : exec_env) {
      auto eq = kv.find('=');
      if (eq == std::string::npos) return Fail("--env wants KEY=VALUE");
      e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (!e.empty()) body["env"] = e;
    if (exec_interactive || exec_tty) {
      json pbody = {{"cmd", cmd}};
      if (!cwd.empty()) pbody["cwd"] = cwd;
      if (!e.empty()) pbody["env"] = e;
      return RunInteractiveExec(c, g, exec_id, pbody);
    }
    auto last = StreamExecBody(c, exec_id, body, /*echo=*/true, nullptr);
    if (!last) return 1;
    int exit_code = last->value("exit_code", 1);
    if (last->value("timed_out", false))
      std::fprintf(stderr, "sbx: the command timed out after %lld s\n", static_cast<long long>(timeout));
    if (g.json) std::fprintf(stderr, "%s\n", last->dump().c_str());
    return exit_code;
  }
  if (*cp) return CopyFiles(c, cp_src, cp_dst);
  if (*ps) {
    auto j = CallJson(c, "GET", "/v1/sandboxes/" + ps_id + "/processes");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", (*j)["processes"].dump().c_str());
      return 0;
    }
    std::printf("%-8s %-8s %-6s %-21s %s\n", "PID", "STATE", "EXIT", "STARTED", "CMD");
    for (const auto& p : (*j)["processes"]) {
      std::string cmdline;
      for (const auto& a : p["cmd"]) cmdline += (cmdline.empty() ? "" : " ") + a.get<std::string>();
      std::string exit = p["exit_code"].is_number() ? std::to_string(p["exit_code"].get<int>()) : "-";
      std::printf("%-8lld %-8s %-6s %-21s %s\n", static_cast<long long>(p.value("pid", 0)), Str(p, "state").c_str(),
                  exit.c_str(), Str(p, "started_at").c_str(), cmdline.c_str());
    }
    return 0;
  }
  if (*spawn) {
    json body = {{"cmd", spawn_cmd}};
    if (!spawn_cwd.empty()) body["cwd"] = spawn_cwd;
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + spawn_id + "/processes", body);
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : std::to_string(j->value("pid", 0)).c_str());
    return 0;
  }
  if (*logs) {
    int exit_code = 0;
    auto r = c.Stream("GET",
                      "/v1/sandboxes/" + logs_id + "/processes/" + std::to_string(logs_pid) + "/output?since=" +
                          std::to_string(logs_since) + "&follow=" + (logs_follow ? "true" : "false"),
                      "", [&](const std::string& line) {
                        auto ev = json::parse(line, nullptr, false);
                        if (!ev.is_object()) return;
                        std::string type = ev.value("type", "");
                        if (type == "stdout" || type == "stderr") {
                          std::string d = ev.value("data", "");
                          WriteSandboxOutput(type == "stdout" ? 1 : 2, d);
                        } else if (type == "gap") {
                          std::fprintf(stderr, "sbx: output %llu to %llu left the ring before it was read\n",
                                       static_cast<unsigned long long>(ev.value("from", 0ULL)),
                                       static_cast<unsigned long long>(ev.value("to", 0ULL)));
                        } else if (type == "exit") {
                          exit_code = ev["exit_code"].is_number() ? ev["exit_code"].get<int>() : 1;
                        }
                      });
    if (auto why = FailureOf(r)) return Fail(*why);
    return exit_code;
  }
  if (*port) {
    // Checked first: the sandbox exists and the caller may reach it.
    auto j = CallJson(c, "GET", "/v1/sandboxes/" + port_id);
    if (!j) return 1;
    std::string base = g.url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    std::string by_path = base + "/v1/sandboxes/" + port_id + "/ports/" + std::to_string(port_num) + "/";
    std::string hostport = base.substr(base.find("://") == std::string::npos ? 0 : base.find("://") + 3);
    std::string scheme = base.find("://") == std::string::npos ? "http" : base.substr(0, base.find("://"));
    std::string listen_port = hostport.rfind(':') == std::string::npos ? "" : hostport.substr(hostport.rfind(':'));
    std::string by_host = scheme + "://" + std::to_string(port_num) + "-" + port_id + "." + proxy_domain + listen_port + "/";
    if (g.json) std::printf("%s\n", json{{"url", by_path}, {"host_url", by_host}}.dump().c_str());
    else std::printf("%s\n%s\n", by_path.c_str(), by_host.c_str());
    return 0;
  }
  if (*ls) {
    auto j = CallJson(c, "GET", "/v1/sandboxes" + (ls_state.empty() ? "" : "?state=" + ls_state));
    if (!j) return 1;
    if (g.json) std::printf("%s\n", (*j)["sandboxes"].dump().c_str());
    else PrintSandboxes((*j)["sandboxes"]);
    return 0;
  }
  if (*get) {
    auto j = CallJson(c, "GET", "/v1/sandboxes/" + get_id);
    if (!j) return 1;
    std::printf("%s\n", j->dump(g.json ? -1 : 2).c_str());
    return 0;
  }
  if (*rm) {
    int rc = 0;
    for (const auto& id : rm_ids) {
      auto j = CallJson(c, "DELETE", "/v1/sandboxes/" + id);
      if (!j) rc = 1;
      else if (!g.json) std::printf("%s\n", id.c_str());
    }
    return rc;
  }
  if (*stop || *start) {
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + life_id + (*stop ? "/stop" : "/start"), json::object());
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : (Str(*j, "id") + " " + Str(*j, "state")).c_str());
    return 0;
  }
  if (*pause || *resume) {
    json body = *pause ? json{{"mode", pause_mode}} : json::object();
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + life_id + (*pause ? "/pause" : "/resume"), body);
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : (Str(*j, "id") + " " + Str(*j, "state")).c_str());
    return 0;
  }
  if (*secret_set) {
    if (!secret_value_given) {
      std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      if (!all.empty() && all.back() == '\n') all.pop_back();
      secret_value = all;
    }
    auto j = CallJson(c, "PUT", "/v1/secrets/" + secret_name, json{{"value", secret_value}});
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : secret_name.c_str());
    return 0;
  }
  if (*secret_ls) {
    auto j = CallJson(c, "GET", "/v1/secrets");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", (*j)["secrets"].dump().c_str());
      return 0;
    }
    std::printf("%-32s %s\n", "NAME", "UPDATED");
    for (const auto& s : (*j)["secrets"]) std::printf("%-32s %s\n", Str(s, "name").c_str(), Str(s, "updated_at").c_str());
    return 0;
  }
  if (*secret_rm) {
    int rc = 0;
    for (const auto& n : secret_names)
      if (!CallJson(c, "DELETE", "/v1/secrets/" + n)) rc = 1;
    return rc;
  }
  if (*usage) {
    std::string q;
    if (!usage_from.empty()) q += "from=" + PercentEncode(usage_from);
    if (!usage_to.empty()) q += (q.empty() ? "" : "&") + std::string("to=") + PercentEncode(usage_to);
    auto j = CallJson(c, "GET", "/v1/usage" + (q.empty() ? "" : "?" + q));
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", j->dump().c_str());
      return 0;
    }
    std::printf("%-20s %-16s %-8s %14s %12s\n", "SANDBOX", "NAME", "TYPE", "BILLED_S", "COST_USD");
    for (const auto& s : (*j)["sandboxes"])
      std::printf("%-20s %-16s %-8s %14.3f %12.6f\n", Str(s, "id").c_str(), Str(s, "name").c_str(),
                  Str(s, "type").c_str(), s.value("billed_seconds", 0.0), s.value("cost_usd", 0.0));
    for (const auto& [t, v] : (*j)["types"].items())
      std::printf("%-20s %-16s %-8s %14.3f %12.6f\n", "type total", "", t.c_str(), v.value("billed_seconds", 0.0),
                  v.value("cost_usd", 0.0));
    const json& sv = (*j)["serverless"];
    std::printf("serverless calls: %lld, $%.6f\n", static_cast<long long>(sv.value("calls", 0)),
                sv.value("cost_usd", 0.0));
    const json& t = (*j)["total"];
    std::printf("total: %.3f s billed, $%.6f (compute $%.6f)\n", t.value("billed_seconds", 0.0),
                t.value("cost_usd", 0.0), t.value("compute_usd", 0.0));
    return 0;
  }
  if (*img_ls) {
    auto j = CallJson(c, "GET", "/v1/images");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", (*j)["images"].dump().c_str());
      return 0;
    }
    std::printf("%-20s %12s %s\n", "NAME", "SIZE_MB", "CREATED");
    for (const auto& i : (*j)["images"])
      std::printf("%-20s %12.1f %s\n", Str(i, "name").c_str(), i.value("size_bytes", 0) / 1048576.0,
                  Str(i, "created_at").c_str());
    return 0;
  }
  if (*img_import) {
    auto r = c.Upload("/v1/images/" + img_name, img_file, [](uint64_t s, uint64_t t) {
      if (isatty(2)) std::fprintf(stderr, "\rimporting: %3d%%", t ? static_cast<int>(s * 100 / t) : 100);
    });
    if (isatty(2)) std::fprintf(stderr, "\n");
    if (!r.ok()) return Fail(r.error().message);
    if (r->status >= 300) return Fail(ErrorMessage(*r));
    std::printf("%s\n", r->body.c_str());
    return 0;
  }
  if (*snap) {
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + snap_id + "/snapshot", json{{"name", snap_name}});
    if (!j) return 1;
    if (g.json) std::printf("%s\n", j->dump().c_str());
    else std::printf("%s (%.1f MB)\n", Str(*j, "name").c_str(), j->value("size_bytes", 0) / 1048576.0);
    return 0;
  }
  if (*fork) {
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + fork_id + "/fork", json{{"count", fork_count}});
    if (!j) return 1;
    if (g.json) std::printf("%s\n", (*j)["sandboxes"].dump().c_str());
    else
      for (const auto& s : (*j)["sandboxes"]) std::printf("%s\n", Str(s, "id").c_str());
    return 0;
  }
  if (*tmpl_build) return RunTemplateBuild(g, tb_name, tb_image, tb_from, tb_type, tb_steps, tb_timeout);
  if (*tmpl_ls) {
    auto j = CallJson(c, "GET", "/v1/snapshots");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", (*j)["snapshots"].dump().c_str());
      return 0;
    }
    std::printf("%-24s %-10s %-16s %10s %7s %s\n", "NAME", "IMAGE", "PARENT", "SIZE_MB", "LAYERS", "CREATED");
    for (const auto& s : (*j)["snapshots"])
      std::printf("%-24s %-10s %-16s %10.1f %7d %s\n", Str(s, "name").c_str(), Str(s, "image").c_str(),
                  Str(s, "parent").c_str(), s.value("size_bytes", 0) / 1048576.0, s.value("layers", 0),
                  Str(s, "created_at").c_str());
    return 0;
  }
  if (*tmpl_rm) {
    int rc = 0;
    for (const auto& n : tmpl_rm_names)
      if (!CallJson(c, "DELETE", "/v1/snapshots/" + n)) rc = 1;
    return rc;
  }
  if (*disk_create) {
    json body = {{"size_mb", disk_size}};
    if (!disk_name.empty()) body["name"] = disk_name;
    auto j = CallJson(c, "POST", "/v1/disks", body);
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : Str(*j, "id").c_str());
    return 0;
  }
  if (*disk_ls) {
    auto j = CallJson(c, "GET", "/v1/disks");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", (*j)["disks"].dump().c_str());
      return 0;
    }
    std::printf("%-20s %-16s %10s %10s %s\n", "ID", "NAME", "SIZE_MB", "USED_MB", "CREATED");
    for (const auto& d : (*j)["disks"])
      std::printf("%-20s %-16s %10lld %10.1f %s\n", Str(d, "id").c_str(), Str(d, "name").c_str(),
                  static_cast<long long>(d.value("size_mb", 0)), d.value("used_bytes", 0) / 1048576.0,
                  Str(d, "created_at").c_str());
    return 0;
  }
  if (*disk_rm) {
    int rc = 0;
    for (const auto& id : disk_rm_ids)
      if (!CallJson(c, "DELETE", "/v1/disks/" + id)) rc = 1;
    return rc;
  }
  if (*disk_exec) {
    json body = {{"cmd", disk_cmd.size() == 1 ? json(disk_cmd[0]) : json(disk_cmd)}, {"timeout_seconds", disk_timeout}};
    auto r = c.Call("POST", "/v1/disks/" + disk_exec_id + "/exec", body.dump());
    if (!r.ok()) return Fail(r.error().message);
    auto j = json::parse(r->body, nullptr, false);
    if (j.is_object() && j.contains("stdout")) {
      std::string o = j.value("stdout", ""), e = j.value("stderr", "");
      WriteSandboxOutput(1, o);
      WriteSandboxOutput(2, e);
    }
    if (r->status >= 300) return Fail(ErrorMessage(*r));
    if (g.json) std::fprintf(stderr, "%s\n", json{{"timing", j["timing"]}, {"cost_usd", j["cost_usd"]}}.dump().c_str());
    return j.value("exit_code", 1);
  }
  if (*img_build) return RunImageBuild(g, build_name, cache_dir);
  if (*bench_patterns) return RunBenchPatterns(g, pattern_runs, pattern_gap);
  if (*bench_disk) return RunBenchDiskExec(g, disk_runs, data_dir, disk_gap);
  if (*bench_hib) {
    if (hib_criu.empty()) {
      const char* env = std::getenv("SBX_CRIU");
      const char* cache = std::getenv("SBX_CACHE_DIR");
      hib_criu = env && *env ? env : std::string(cache && *cache ? cache : "/var/cache/sbx") + "/criu/criu";
      if (::access(hib_criu.c_str(), X_OK) != 0) hib_criu.clear();  // no floor row then
    }
    return RunBenchHibernate(g, hib_runs, data_dir, hib_criu);
  }
  if (*bench) return RunBench(g, runs, bench_image, !no_peers);
  return 0;
}
