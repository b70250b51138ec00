// `sbx disk`: persistent disks, and serverless calls on them (`disk exec`).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/base64.h"
#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

struct DiskCommands {
  CLI::App *disk_create = nullptr, *disk_ls = nullptr, *disk_rm = nullptr, *disk_exec = nullptr;
  std::string disk_name;
  int64_t disk_size = 1024;
  std::vector<std::string> disk_rm_ids;
  std::string disk_exec_id;
  std::vector<std::string> disk_cmd;
  int64_t disk_timeout = 300;
  std::string disk_isolation;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void DiskCommands::Add(CLI::App& app) {
  auto* disk = app.add_subcommand("disk", "persistent disks and serverless calls");
  disk->footer("Examples: sbx disk create --name work\n"
              "          sbx disk exec work -- 'cd /mnt/disk && git status'");
  disk->require_subcommand(1);
  disk_create = disk->add_subcommand("create", "create a disk");
  disk_create->footer("Example: sbx disk create --name work --size-mb 4096");
  disk_create->add_option("--name", disk_name, "a unique name");
  disk_create->add_option("--size-mb", disk_size, "size limit in MiB (default 1024)");
  disk_ls = disk->add_subcommand("ls", "list disks");
  disk_ls->footer("Example: sbx disk ls");
  disk_rm = disk->add_subcommand("rm", "delete disks");
  disk_rm->footer("Example: sbx disk rm work");
  disk_rm->add_option("ids", disk_rm_ids)->required();
  disk_exec = disk->add_subcommand("exec", "run one command in a fresh sandbox on the disk");
  disk_exec->footer("Examples: sbx disk exec work -- 'cd /mnt/disk && make test'\n"
              "          sbx disk exec work -- ls -l /mnt/disk");
  disk_exec->add_option("id", disk_exec_id, "disk id or name")->required();
  disk_exec->add_option("--timeout", disk_timeout, "seconds (at most 300)");
  disk_exec->add_option("--isolation", disk_isolation, "the call's wall: container or gvisor (default: sbxd's)");
  disk_exec->add_option("cmd", disk_cmd, "the command (after --)")->required();
}

std::optional<int> DiskCommands::Run(HttpClient& c, const Globals& g) {
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
    // base64: the output arrives byte for byte (a tar, an image), not as text.
    json body = {{"cmd", disk_cmd.size() == 1 ? json(disk_cmd[0]) : json(disk_cmd)},
                 {"timeout_seconds", disk_timeout},
                 {"encoding", "base64"}};
    if (!disk_isolation.empty()) body["isolation"] = disk_isolation;
    auto r = c.Call("POST", "/v1/disks/" + disk_exec_id + "/exec", body.dump());
    if (!r.ok()) return Fail(r.error().message);
    auto j = json::parse(r->body, nullptr, false);
    if (j.is_object() && j.contains("stdout")) {
      auto o = Base64Decode(j.value("stdout", "")), e = Base64Decode(j.value("stderr", ""));
      if (!o.ok() || !e.ok()) return Fail("sbxd sent output that is not base64");
      WriteSandboxOutput(1, *o);
      WriteSandboxOutput(2, *e);
    }
    if (r->status >= 300) return Fail(ErrorMessage(*r));
    if (g.json) std::fprintf(stderr, "%s\n", json{{"timing", j["timing"]}, {"cost_usd", j["cost_usd"]}}.dump().c_str());
    return j.value("exit_code", 1);
  }
  return std::nullopt;
}

}  // namespace

Runner AddDiskCommands(CLI::App& app) { return Register<DiskCommands>(app); }

}  // namespace sbx::cli
