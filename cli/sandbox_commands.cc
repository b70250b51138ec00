// `sbx create`, `ls`, `get`, `rm`, `stop`, `start`, `pause`, `resume`: a sandbox's life.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

void PrintSandboxes(const json& list) {
  std::printf("%-20s %-16s %-9s %-8s %-10s %-21s %s\n", "ID", "NAME", "STATE", "TYPE", "IMAGE",
              "CREATED", "EXPIRES");
  for (const auto& s : list)
    std::printf("%-20s %-16s %-9s %-8s %-10s %-21s %s\n", Str(s, "id").c_str(), Str(s, "name").c_str(),
                Str(s, "state").c_str(), Str(s, "type").c_str(), Str(s, "image").c_str(),
                Str(s, "created_at").c_str(), Str(s, "expires_at").c_str());
}

struct CreateCommand {
  CLI::App* create = nullptr;
  std::string type = "small", image, from, name;
  int64_t ttl = 0, memory_mb = 0, idle = 0;
  std::string ttl_action;
  int cpus = 0, pids = 0;
  bool no_env = false, new_privs = false;
  std::vector<std::string> env_kv, md_kv;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void CreateCommand::Add(CLI::App& app) {
  create = app.add_subcommand("create", "create a sandbox and wait until it is ready");
  create->add_option("--type", type, "small, default or large");
  create->add_option("--image", image, "image to start from (default: default)");
  create->add_option("--from", from, "named snapshot to start from");
  create->add_option("--ttl", ttl, "seconds until it stops by itself (default 3600)");
  create->add_option("--ttl-action", ttl_action, "what the TTL does: stop (default) or pause");
  create->add_option("--idle-timeout", idle, "pause it after this many idle seconds (0: never)");
  create->add_flag("--no-env", no_env, "inject none of the daemon's secrets");
  create->add_flag("--new-privs", new_privs,
                   "let setuid programs (su, sudo) raise privileges inside (no_new_privs false)");
  create->add_option("--name", name, "a unique name");
  create->add_option("--env,-e", env_kv, "KEY=VALUE");
  create->add_option("--metadata,-m", md_kv, "KEY=VALUE");
  create->add_option("--memory-mb", memory_mb, "override the type's memory");
  create->add_option("--cpus", cpus, "override the type's vCPUs");
  create->add_option("--pids", pids, "override the type's process limit");
}

std::optional<int> CreateCommand::Run(HttpClient& c, const Globals& g) {
  if (*create) {
    json body = {{"type", type}, {"no_env", no_env}};
    if (new_privs) body["no_new_privs"] = false;
    if (!image.empty()) body["image"] = image;
    if (!from.empty()) body["from"] = from;
    if (!name.empty()) body["name"] = name;
    // Given, it is sent as it is (so --ttl 0 is refused by sbxd, not taken as "the default").
    if (create->count("--ttl") > 0) body["ttl_seconds"] = ttl;
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
  return std::nullopt;
}

struct SandboxCommands {
  CLI::App *ls = nullptr, *get = nullptr, *rm = nullptr;
  CLI::App *stop = nullptr, *start = nullptr, *pause = nullptr, *resume = nullptr;
  std::string ls_state;
  std::string get_id;
  std::vector<std::string> rm_ids;
  std::string life_id;
  std::string pause_mode = "freeze";

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void SandboxCommands::Add(CLI::App& app) {
  ls = app.add_subcommand("ls", "list sandboxes");
  ls->add_option("--state", ls_state, "only this state");
  get = app.add_subcommand("get", "show one sandbox");
  get->add_option("id", get_id)->required();
  rm = app.add_subcommand("rm", "delete sandboxes");
  rm->add_option("ids", rm_ids)->required();
  stop = app.add_subcommand("stop", "stop a sandbox (files kept)");
  start = app.add_subcommand("start", "start a stopped sandbox");
  stop->add_option("id", life_id)->required();
  start->add_option("id", life_id)->required();
  pause = app.add_subcommand("pause", "pause a sandbox (compute not billed until resumed)");
  resume = app.add_subcommand("resume", "resume a paused sandbox");
  pause->add_option("id", life_id)->required();
  pause->add_option("--mode", pause_mode, "freeze (memory kept, resume in ms) or hibernate (memory to disk)");
  resume->add_option("id", life_id)->required();
}

std::optional<int> SandboxCommands::Run(HttpClient& c, const Globals& g) {
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
  return std::nullopt;
}

}  // namespace

Runner AddCreateCommand(CLI::App& app) { return Register<CreateCommand>(app); }
Runner AddSandboxCommands(CLI::App& app) { return Register<SandboxCommands>(app); }

}  // namespace sbx::cli
