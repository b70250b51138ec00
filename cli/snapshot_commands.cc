// `sbx snapshot`, `fork`, `template` and `image`: named snapshots, templates and images.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

struct SnapshotCommands {
  CLI::App *snap = nullptr, *fork = nullptr;
  CLI::App *tmpl_build = nullptr, *tmpl_ls = nullptr, *tmpl_rm = nullptr;
  std::string snap_id, snap_name;
  std::string fork_id;
  int fork_count = 1;
  bool snap_memory = false, fork_memory = false;
  std::string tb_name, tb_image, tb_from, tb_type = "small", tb_user;
  std::vector<std::string> tb_steps;
  int64_t tb_timeout = 1800;
  std::vector<std::string> tmpl_rm_names;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void SnapshotCommands::Add(CLI::App& app) {
  snap = app.add_subcommand("snapshot", "capture a sandbox's files as a named snapshot");
  snap->footer("Example: sbx snapshot my-box with-deps");
  snap->add_option("id", snap_id)->required();
  snap->add_option("name", snap_name)->required();
  snap->add_flag("--memory", snap_memory,
                 "keep the running sandbox's memory too: sandboxes from it start with its processes "
                 "(every wall; containers where sbxd has CRIU)");
  fork = app.add_subcommand("fork", "new sandboxes with a copy of a sandbox's files");
  fork->footer("Example: sbx fork my-box --count 3");
  fork->add_option("id", fork_id)->required();
  fork->add_option("--count", fork_count, "how many (default 1)");
  fork->add_flag("--memory", fork_memory,
                 "start each from the running sandbox's memory too, its processes running (every wall; "
                 "containers where sbxd has CRIU)");

  auto* tmpl = app.add_subcommand("template", "templates (named snapshots)");
  tmpl->footer("Examples: sbx template build py --image default --run 'python3 -m venv /home/user/v' --run '/home/user/v/bin/pip install sympy'\n"
              "          sbx create --from py");
  tmpl->require_subcommand(1);
  tmpl_build = tmpl->add_subcommand("build", "run steps in a fresh sandbox, then snapshot it as NAME");
  tmpl_build->footer("Examples: sbx template build py --image default --run 'python3 -m venv /home/user/v' --run '/home/user/v/bin/pip install sympy'\n"
                     "          sbx template build tools -u root --run 'apt-get install -y jq'");
  tmpl_build->add_option("name", tb_name)->required();
  tmpl_build->add_option("--image", tb_image, "image to start from (default: default)");
  tmpl_build->add_option("--from", tb_from, "snapshot to start from");
  tmpl_build->add_option("--type", tb_type, "sandbox type for the build");
  tmpl_build->add_option("--run", tb_steps, "a step (shell command); repeat for more")->required();
  tmpl_build->add_option("--timeout", tb_timeout, "seconds per step (default 1800)");
  tmpl_build->add_option("--user,-u", tb_user,
                         "run the steps as this user (default: the sandbox's user); the template keeps the "
                         "sandbox's user either way");
  tmpl_ls = tmpl->add_subcommand("ls", "list templates");
  tmpl_ls->footer("Example: sbx template ls");
  tmpl_rm = tmpl->add_subcommand("rm", "delete templates");
  tmpl_rm->footer("Example: sbx template rm py");
  tmpl_rm->add_option("names", tmpl_rm_names)->required();
}

std::optional<int> SnapshotCommands::Run(HttpClient& c, const Globals& g) {
  if (*snap) {
    json body = {{"name", snap_name}};
    if (snap_memory) body["memory"] = true;
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + snap_id + "/snapshot", body);
    if (!j) {
      // `sbx snapshot rm NAME` reads as a snapshot of a sandbox named "rm".
      if (snap_id == "rm" || snap_id == "ls" || snap_id == "list" || snap_id == "delete")
        std::fprintf(stderr, "snapshots are listed and removed as templates: sbx template ls, sbx template rm NAME\n");
      return 1;
    }
    if (g.json) std::printf("%s\n", j->dump().c_str());
    else std::printf("%s (%.1f MB%s)\n", Str(*j, "name").c_str(), j->value("size_bytes", 0) / 1048576.0,
                     j->value("memory", false) ? ", with memory" : "");
    return 0;
  }
  if (*fork) {
    json body = {{"count", fork_count}};
    if (fork_memory) body["memory"] = true;
    auto j = CallJson(c, "POST", "/v1/sandboxes/" + fork_id + "/fork", body);
    if (!j) return 1;
    if (g.json) std::printf("%s\n", (*j)["sandboxes"].dump().c_str());
    else
      for (const auto& s : (*j)["sandboxes"]) std::printf("%s\n", Str(s, "id").c_str());
    return 0;
  }
  if (*tmpl_build) return RunTemplateBuild(g, tb_name, tb_image, tb_from, tb_type, tb_user, tb_steps, tb_timeout);
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
  return std::nullopt;
}

struct ImageCommands {
  CLI::App *img_ls = nullptr, *img_import = nullptr, *img_build = nullptr, *img_rm = nullptr;
  std::string img_name, img_file;
  std::vector<std::string> rm_names;
  std::string build_name, cache_dir = std::getenv("SBX_CACHE_DIR") ? std::getenv("SBX_CACHE_DIR") : "/var/cache/sbx";

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void ImageCommands::Add(CLI::App& app) {
  auto* img = app.add_subcommand("image", "images");
  img->footer("Examples: sbx image ls\n"
              "          sbx image import node20 node20.tar");
  img->require_subcommand(1);
  img_ls = img->add_subcommand("ls", "list images");
  img_ls->footer("Example: sbx image ls");
  img_import = img->add_subcommand("import", "import a rootfs tarball or docker export");
  img_import->footer("Example: docker export $(docker create node:20) > node20.tar && sbx image import node20 node20.tar");
  img_import->add_option("name", img_name)->required();
  img_import->add_option("file", img_file)->required();
  img_rm = img->add_subcommand("rm", "delete images that no sandbox or snapshot starts from");
  img_rm->footer("Example: sbx image rm node20");
  img_rm->add_option("names", rm_names, "image names")->required();
  img_build = img->add_subcommand("build", "build a built-in image (default)");
  img_build->footer("Example: sbx image build default");
  img_build->add_option("name", build_name)->required();
  img_build->add_option("--cache-dir", cache_dir, "where slow artefacts are cached (env SBX_CACHE_DIR)");
}

std::optional<int> ImageCommands::Run(HttpClient& c, const Globals& g) {
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
    Progress progress("importing " + img_file);
    auto r = c.Upload("/v1/images/" + img_name, img_file, [&](uint64_t s, uint64_t t) { progress.Update(s, t); });
    progress.Done();
    if (auto why = FailureOf(r)) return Fail(*why);
    std::printf("%s\n", r->body.c_str());
    return 0;
  }
  if (*img_rm) {
    int rc = 0;
    for (const auto& n : rm_names) {
      auto j = CallJson(c, "DELETE", "/v1/images/" + n);
      if (!j) rc = 1;
      else if (!g.json) std::printf("%s\n", n.c_str());
      else std::printf("%s\n", j->dump().c_str());
    }
    return rc;
  }
  if (*img_build) return RunImageBuild(g, build_name, cache_dir);
  return std::nullopt;
}

}  // namespace

Runner AddSnapshotCommands(CLI::App& app) { return Register<SnapshotCommands>(app); }
Runner AddImageCommands(CLI::App& app) { return Register<ImageCommands>(app); }

}  // namespace sbx::cli
