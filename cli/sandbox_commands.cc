// `sbx create`, `ls`, `get`, `update`, `rm`, `stop`, `start`, `pause`, `resume`: a
// sandbox's life. Wherever an id is asked for, a name or a unique prefix of an id will do
// (sbxd resolves it).
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
  std::string type = "small", image, from, name, isolation;
  int64_t ttl = 0, memory_mb = 0, idle = 0;
  std::string ttl_action;
  int cpus = 0, pids = 0;
  bool no_env = false, new_privs = false, is_public = false;
  std::vector<std::string> env_kv, md_kv, disks;
  std::string network, user;
  std::vector<std::string> allow, deny;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void CreateCommand::Add(CLI::App& app) {
  create = app.add_subcommand("create", "create a sandbox and wait until it is ready");
  create->add_option("--type", type, "small, default or large");
  create->add_option("--isolation", isolation, "the wall: container, gvisor or microvm (default: sbxd's --default-isolation)");
  create->add_option("--image", image, "image to start from (default: default)");
  create->add_option("--from", from, "named snapshot to start from");
  create->add_option("--ttl", ttl, "seconds until it stops by itself (default 3600)");
  create->add_option("--ttl-action", ttl_action, "what the TTL does: stop (default), pause or delete");
  create->add_option("--idle-timeout", idle, "pause it after this many idle seconds (0: never)");
  create->add_flag("--no-env", no_env, "inject none of the daemon's secrets");
  create->add_flag("--new-privs", new_privs,
                   "let setuid programs (su, sudo) raise privileges inside (no_new_privs false)");
  create->add_option("--user,-u", user,
                     "who commands and file operations run as by default (default: user where the image has it, else root)");
  create->add_option("--name", name, "a unique name");
  create->add_option("--env,-e", env_kv, "KEY=VALUE");
  create->add_option("--metadata,-m", md_kv, "KEY=VALUE");
  create->add_option("--memory-mb", memory_mb, "override the type's memory");
  create->add_option("--cpus", cpus, "override the type's vCPUs");
  create->add_option("--pids", pids, "override the type's process limit");
  create->add_option("--network", network, "none (loopback only) or outbound (the daemon's default unless set)");
  AddNetworkRuleOptions(create, &allow, &deny);
  create->add_option("--disk", disks, "DISK[:PATH]: mount a persistent disk (id or name) at PATH (default /mnt/disk)");
  create->add_flag("--public", is_public, "open its ports through sbxd's proxy without credentials");
  create->footer("Examples: sbx create --name my-box --allow pypi.org --allow '*.pythonhosted.org'\n"
                 "          sbx create --disk work:/mnt/work --ttl 600\n"
                 "          sbx create --isolation gvisor --from my-template\n"
                 "          id=$(sbx create --image default --public)");
}

std::optional<int> CreateCommand::Run(HttpClient& c, const Globals& g) {
  if (*create) {
    json body = {{"type", type}, {"no_env", no_env}};
    if (!isolation.empty()) body["isolation"] = isolation;
    if (new_privs) body["no_new_privs"] = false;
    if (!image.empty()) body["image"] = image;
    if (!from.empty()) body["from"] = from;
    if (!user.empty()) body["user"] = user;
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
    if (!network.empty() || !allow.empty() || !deny.empty()) body["network"] = NetworkBody(network, allow, deny);
    if (is_public) body["public"] = true;
    for (const auto& d : disks) {
      size_t colon = d.find(':');
      json mount = {{"id", d.substr(0, colon)}};
      if (colon != std::string::npos) mount["mount_path"] = d.substr(colon + 1);
      if (mount["id"].get<std::string>().empty()) return Usage("--disk wants DISK[:PATH]");
      body["disks"].push_back(mount);
    }
    auto j = CallJson(c, "POST", "/v1/sandboxes", body);
    if (!j) return 1;
    if (g.json) std::printf("%s\n", j->dump().c_str());
    else std::printf("%s\n", Str(*j, "id").c_str());
    return 0;
  }
  return std::nullopt;
}

struct SandboxCommands {
  CLI::App *ls = nullptr, *get = nullptr, *rm = nullptr, *update = nullptr;
  CLI::App *stop = nullptr, *start = nullptr, *pause = nullptr, *resume = nullptr;
  std::string ls_state;
  bool ls_quiet = false;
  std::vector<std::string> ls_filters, ls_md;
  std::string up_id, up_ttl_action, up_auto_resume, up_public;
  int64_t up_ttl = 0, up_idle = 0;
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
  ls->add_flag("--quiet,-q", ls_quiet, "print the ids only");
  ls->add_option("--filter,-f", ls_filters, "name=N or state=S (repeatable)");
  ls->add_option("--metadata,-m", ls_md, "KEY=VALUE: only sandboxes with this metadata (repeatable)");
  ls->footer("Example: sbx ls -q -m team=ml | xargs sbx rm");
  get = app.add_subcommand("get", "show one sandbox");
  get->footer("Examples: sbx get my-box\n"
              "          sbx get my-box --json | jq .state");
  get->add_option("id", get_id, "sandbox id, name or unique id prefix")->required();
  update = app.add_subcommand("update", "change a sandbox's TTL, idle timeout, auto-resume or public ports");
  update->add_option("id", up_id, "sandbox id, name or unique id prefix")->required();
  update->add_option("--ttl", up_ttl, "seconds from now until its TTL acts");
  update->add_option("--ttl-action", up_ttl_action, "stop, pause or delete");
  update->add_option("--idle-timeout", up_idle, "pause it after this many idle seconds (0: never)");
  update->add_option("--auto-resume", up_auto_resume, "true or false: a call on it while paused resumes it");
  update->add_option("--public", up_public, "true or false: its ports need no credentials");
  update->footer("Example: sbx update my-box --ttl 7200 --public true");
  rm = app.add_subcommand("rm", "delete sandboxes");
  rm->footer("Examples: sbx rm my-box\n"
              "          sbx ls -q -m job=ci | xargs -r sbx rm");
  rm->add_option("ids", rm_ids, "sandbox ids, names or unique id prefixes")->required();
  stop = app.add_subcommand("stop", "stop a sandbox (files kept)");
  stop->footer("Example: sbx stop my-box");
  start = app.add_subcommand("start", "start a stopped sandbox");
  start->footer("Example: sbx start my-box");
  stop->add_option("id", life_id, "sandbox id, name or unique id prefix")->required();
  start->add_option("id", life_id, "sandbox id, name or unique id prefix")->required();
  pause = app.add_subcommand("pause", "pause a sandbox (compute not billed until resumed)");
  pause->footer("Examples: sbx pause my-box\n"
              "          sbx pause --mode hibernate my-box");
  resume = app.add_subcommand("resume", "resume a paused sandbox");
  resume->footer("Example: sbx resume my-box");
  pause->add_option("id", life_id, "sandbox id, name or unique id prefix")->required();
  pause->add_option("--mode", pause_mode, "freeze (memory kept, resume in ms) or hibernate (memory to disk)");
  resume->add_option("id", life_id, "sandbox id, name or unique id prefix")->required();
}

std::optional<int> SandboxCommands::Run(HttpClient& c, const Globals& g) {
  if (*ls) {
    std::vector<std::string> q;
    if (!ls_state.empty()) q.push_back("state=" + PercentEncode(ls_state));
    for (const auto& f : ls_filters) {
      auto eq = f.find('=');
      std::string k = f.substr(0, eq);
      if (eq == std::string::npos || (k != "name" && k != "state"))
        return Usage("--filter wants name=N or state=S (metadata: -m KEY=VALUE)");
      q.push_back(k + "=" + PercentEncode(f.substr(eq + 1)));
    }
    for (const auto& m : ls_md) {
      auto eq = m.find('=');
      if (eq == std::string::npos || eq == 0) return Usage("--metadata wants KEY=VALUE");
      q.push_back("metadata." + PercentEncode(m.substr(0, eq)) + "=" + PercentEncode(m.substr(eq + 1)));
    }
    std::string query;
    for (const auto& part : q) query += (query.empty() ? "?" : "&") + part;
    auto j = CallJson(c, "GET", "/v1/sandboxes" + query);
    if (!j) return 1;
    if (g.json) std::printf("%s\n", (*j)["sandboxes"].dump().c_str());
    else if (ls_quiet)
      for (const auto& s : (*j)["sandboxes"]) std::printf("%s\n", Str(s, "id").c_str());
    else PrintSandboxes((*j)["sandboxes"]);
    return 0;
  }
  if (*update) {
    json body = json::object();
    if (update->count("--ttl")) body["ttl_seconds"] = up_ttl;
    if (!up_ttl_action.empty()) body["ttl_action"] = up_ttl_action;
    if (update->count("--idle-timeout")) body["idle_timeout_seconds"] = up_idle;
    for (auto [text, key] : {std::pair{&up_auto_resume, "auto_resume"}, std::pair{&up_public, "public"}}) {
      if (text->empty()) continue;
      if (*text != "true" && *text != "false") return Usage(std::string("--") + (key == std::string("public") ? "public" : "auto-resume") + " wants true or false");
      body[key] = *text == "true";
    }
    if (body.empty()) return Usage("update needs at least one of --ttl, --ttl-action, --idle-timeout, --auto-resume, --public");
    auto j = CallJson(c, "PATCH", "/v1/sandboxes/" + up_id, body);
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : (Str(*j, "id") + " " + Str(*j, "state") + " expires " + Str(*j, "expires_at")).c_str());
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
