// `sbx exec`, `cp`, `port`, `ps`, `spawn`, `logs`: work inside a sandbox (commands, files,
// background processes, the port proxy's URLs).
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/base64.h"
#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

// An exec's stdin travels in its JSON body (base64: 4/3 of it), which sbxd takes up to
// 64 MiB.
constexpr size_t kMaxExecStdin = 32 << 20;

// All of stdin, or nullopt past `max` bytes.
std::optional<std::string> ReadStdin(size_t max) {
  std::string in;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (in.size() > max) return std::nullopt;
  }
  return in;
}

struct ExecCommands {
  CLI::App *exec = nullptr, *cp = nullptr, *port = nullptr;
  CLI::App *ps = nullptr, *spawn = nullptr, *logs = nullptr, *kill = nullptr;
  std::string exec_id, cwd, exec_user;
  int64_t timeout = 60;
  std::vector<std::string> cmd, exec_env;
  bool exec_interactive = false, exec_tty = false, exec_no_stdin = false;
  std::string cp_src, cp_dst, cp_user;
  std::string port_id, proxy_domain = "sbx.localhost";
  int port_num = 0;
  std::string ps_id;
  std::string spawn_id, spawn_cwd, spawn_user;
  std::vector<std::string> spawn_cmd;
  std::string logs_id;
  int64_t logs_pid = 0;
  uint64_t logs_since = 0;
  bool logs_follow = false;
  std::string kill_id, kill_signal = "KILL";
  int64_t kill_pid = 0;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void ExecCommands::Add(CLI::App& app) {
  exec = app.add_subcommand("exec", "run a command in a sandbox, streaming its output");
  exec->add_option("id", exec_id, "sandbox id, name or unique id prefix")->required();
  exec->add_option("--timeout", timeout, "seconds before the command's tree is killed (default 60)");
  exec->add_option("--cwd", cwd, "working directory (default: the user's home)");
  exec->add_option("--user,-u", exec_user, "run as this user of the sandbox (a name or a uid; default: the sandbox's user)");
  exec->add_option("--env,-e", exec_env, "KEY=VALUE");
  exec->add_flag("--interactive,-i", exec_interactive,
                  "stream this input (a pipe, a terminal) to the command's stdin as it comes, as docker exec -i");
  exec->add_flag("--tty,-t", exec_tty, "run the command on a pseudo-terminal with this terminal attached (-it for a shell)");
  exec->add_flag("--no-stdin,-n", exec_no_stdin, "never send stdin, not even a redirected file (as ssh -n)");
  exec->footer("Examples: sbx exec my-box -- ls -l /home/user\n"
               "          echo data | sbx exec -i my-box -- wc -c\n"
               "          sbx exec -u root my-box -- id\n"
               "          sbx exec my-box -- tar -C /home/user -cf - out > out.tar");
  exec->add_option("cmd", cmd, "the command and its arguments (after --)")->required();

  cp = app.add_subcommand("cp", "copy files or folders into or out of a sandbox (ID:/path names the sandbox side)");
  cp->footer("Examples: sbx cp ./src my-box:/home/user/src       # a folder in\n"
              "          sbx cp my-box:/home/user/out.txt .       # a file out\n"
              "          sbx cp my-box:/home/user/results/. ./r   # a folder's contents\n"
              "          sbx cp -u root ./app.conf my-box:/etc/app.conf\n"
              "          sbx cp my-box:/home/user/out - | tar -tf -  # a tar on stdout\n"
              "          tar -cf - data | sbx cp - my-box:/home/user  # a tar from stdin, unpacked");
  cp->add_option("src", cp_src, "a local path, ID:/path, or - (a tar on stdin, into an existing folder)")->required();
  cp->add_option("dst", cp_dst, "a local path, ID:/path, or - (a tar on stdout)")->required();
  cp->add_option("--user,-u", cp_user, "read and write the sandbox's side as this user (default: the sandbox's user)");

  port = app.add_subcommand("port", "the URLs that reach a port inside a sandbox through sbxd's proxy");
  port->footer("Example: sbx port my-box 8000");
  port->add_option("id", port_id, "sandbox id, name or unique id prefix")->required();
  port->add_option("port", port_num, "TCP port inside the sandbox")->required()->check(CLI::Range(1, 65535));
  port->add_option("--proxy-domain", proxy_domain, "sbxd's --proxy-domain (default sbx.localhost)");

  ps = app.add_subcommand("ps", "list a sandbox's background processes");
  ps->footer("Example: sbx ps my-box");
  ps->add_option("id", ps_id, "sandbox id, name or unique id prefix")->required();
  spawn = app.add_subcommand("spawn", "start a background process in a sandbox; prints its pid");
  spawn->footer("Examples: sbx spawn my-box -- python3 -m http.server 8000\n"
              "          sbx spawn --cwd /home/user/app my-box -- 'npm run dev > dev.log 2>&1'");
  spawn->add_option("id", spawn_id, "sandbox id, name or unique id prefix")->required();
  spawn->add_option("--cwd", spawn_cwd, "working directory (default: the user's home)");
  spawn->add_option("--user,-u", spawn_user, "run as this user of the sandbox (a name or a uid; default: the sandbox's user)");
  spawn->add_option("cmd", spawn_cmd, "the command and its arguments (after --)")->required();
  logs = app.add_subcommand("logs", "print a background process's output (from its ring)");
  logs->footer("Example: sbx logs -f my-box 42");
  logs->add_option("id", logs_id, "sandbox id, name or unique id prefix")->required();
  logs->add_option("pid", logs_pid, "process id")->required();
  logs->add_flag("--follow,-f", logs_follow, "keep printing until the process ends");
  logs->add_option("--since", logs_since, "first sequence number to print");
  kill = app.add_subcommand("kill", "send a signal to a background process (and its group)");
  kill->add_option("id", kill_id, "sandbox id, name or unique id prefix")->required();
  kill->add_option("pid", kill_pid, "process id (from sbx spawn or sbx ps)")->required();
  kill->add_option("signal", kill_signal, "a name (KILL, the default, TERM, INT, HUP, ...) or a number");
  kill->footer("Example: sbx kill my-box 42 TERM");
}

std::optional<int> ExecCommands::Run(HttpClient& c, const Globals& g) {
  if (*exec) {
    // The one shell rule (docs/API.md, "Exec"): one word after -- is a shell command line,
    // several are the argv.
    json cmd_field = cmd.size() == 1 ? json(cmd[0]) : json(cmd);
    json body = {{"cmd", cmd_field}, {"timeout_seconds", timeout}};
    if (!cwd.empty()) body["cwd"] = cwd;
    if (!exec_user.empty()) body["user"] = exec_user;
    json e = json::object();
    for (const auto& kv : exec_env) {
      auto eq = kv.find('=');
      if (eq == std::string::npos) return Fail("--env wants KEY=VALUE");
      e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (!e.empty()) body["env"] = e;
    if (exec_tty) {
      json pbody = {{"cmd", cmd_field}};
      if (!cwd.empty()) pbody["cwd"] = cwd;
      if (!exec_user.empty()) pbody["user"] = exec_user;
      if (!e.empty()) pbody["env"] = e;
      return RunInteractiveExec(c, g, exec_id, pbody);
    }
    // The input (docs/API.md, "sbx exec"): a redirected file (`< file`) is read to its end
    // and sent with the exec, the fast path; with -i (as docker exec -i) a pipe or a
    // terminal is streamed to a background process's stdin as it comes, and so is a file
    // too large for one exec. A pipe is read only with -i: a parent that hands down a pipe
    // it never closes (Node's child_process does) would otherwise leave a command that
    // reads stdin waiting. Never with -n.
    struct stat in_st;
    bool file_in = !exec_no_stdin && fstat(0, &in_st) == 0 && S_ISREG(in_st.st_mode);
    bool stream_in = !exec_no_stdin && exec_interactive && !file_in;
    if (file_in && static_cast<uint64_t>(in_st.st_size) > kMaxExecStdin) stream_in = true;
    if (stream_in) {
      json pbody = {{"cmd", cmd_field}};
      if (!cwd.empty()) pbody["cwd"] = cwd;
      if (!exec_user.empty()) pbody["user"] = exec_user;
      if (!e.empty()) pbody["env"] = e;
      return RunStreamingExec(c, g, exec_id, pbody, timeout);
    }
    if (file_in) {
      auto in = ReadStdin(kMaxExecStdin);
      if (!in) {
        Fail("stdin grew past " + std::to_string(kMaxExecStdin >> 20) + " MiB while it was read");
        return 125;
      }
      body["stdin"] = Base64Encode(*in);  // the exec asks for base64 (StreamExecBody)
    }
    // The CLI's own failures (sbxd unreachable, no such sandbox) and output cut at the cap
    // exit 125, so that they are not taken for the command's own exit status.
    std::string out, err;
    auto t0 = std::chrono::steady_clock::now();
    auto last = StreamExecBody(c, exec_id, body, /*echo=*/!g.json, g.json ? &out : nullptr, g.json ? &err : nullptr);
    if (!last) return 125;
    int exit_code = last->value("exit_code", 1);
    std::string cut;
    for (const char* s : {"stdout", "stderr"})
      if (last->value(std::string(s) + "_truncated", false)) cut += (cut.empty() ? "" : " and ") + std::string(s);
    if (g.json) {
      // One object: the exit line's fields (exit code, timing, truncation) with the output.
      json fields = *last;
      fields.erase("type");
      PrintExecObject(out, err, fields,
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      return cut.empty() ? exit_code : 125;
    }
    if (last->value("timed_out", false))
      std::fprintf(stderr, "sbx: the command timed out after %lld s\n", static_cast<long long>(timeout));
    if (!cut.empty()) {
      std::fprintf(stderr, "sbx: the command's %s was cut at sbxd's output cap (the command exited %d)\n",
                   cut.c_str(), exit_code);
      return 125;
    }
    return exit_code;
  }
  if (*cp) return CopyFiles(c, cp_src, cp_dst, cp_user);
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
  if (*kill) {
    json sig = kill_signal;
    if (!kill_signal.empty() && kill_signal.find_first_not_of("0123456789") == std::string::npos)
      sig = std::stoi(kill_signal.substr(0, 4));
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + kill_id + "/processes/" + std::to_string(kill_pid) + "/signal",
                      json{{"signal", sig}});
    if (!j) return 1;
    if (g.json) std::printf("%s\n", j->dump().c_str());
    return 0;
  }
  if (*spawn) {
    json body = {{"cmd", spawn_cmd.size() == 1 ? json(spawn_cmd[0]) : json(spawn_cmd)}};  // the one shell rule
    if (!spawn_cwd.empty()) body["cwd"] = spawn_cwd;
    if (!spawn_user.empty()) body["user"] = spawn_user;
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
  return std::nullopt;
}

}  // namespace

Runner AddExecCommands(CLI::App& app) { return Register<ExecCommands>(app); }

}  // namespace sbx::cli
