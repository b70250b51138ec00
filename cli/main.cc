// sbx: the command-line client. Wiring only: the global flags, each command group's
// subcommands (the *_commands.cc files, see commands.h), and dispatch to the one parsed.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "base/fs.h"
#include "cli.h"
#include "commands.h"
#include "http_client.h"

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

int RunCommand(int argc, char** argv) {
  CLI::App app{"sbx: run AI agents' tool calls in isolated sandboxes"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--json, --url) may follow the subcommand
  Globals g;
  g.data_dir = "/var/lib/sbx";
  g.url = std::getenv("SBX_URL") ? std::getenv("SBX_URL") : "http://127.0.0.1:7070";
  app.add_option("--url", g.url, "sbxd address (env SBX_URL)");
  app.add_option("--data-dir", g.data_dir, "where to find the admin key when SBX_API_KEY is unset");
  app.add_flag("--json", g.json, "print JSON for scripts");
  bool raw_output = false;
  app.add_flag("--raw-output", raw_output,
               "write sandbox output to a terminal as it is, escape sequences included (default: shown as text)");

  // In the order `sbx --help` lists the subcommands.
  std::vector<Runner> groups;
  groups.push_back(AddCreateCommand(app));
  groups.push_back(AddExecCommands(app));
  groups.push_back(AddSandboxCommands(app));
  groups.push_back(AddSecretCommands(app));
  groups.push_back(AddUsageCommand(app));
  groups.push_back(AddSnapshotCommands(app));
  groups.push_back(AddDiskCommands(app));
  groups.push_back(AddImageCommands(app));
  groups.push_back(AddBenchCommands(app));
  groups.push_back(AddHealthCommand(app));

  CLI11_PARSE(app, argc, argv);
  const char* raw_env = std::getenv("SBX_RAW_OUTPUT");
  SetRawOutput(raw_output || (raw_env && std::string(raw_env) == "1"));
  g.api_key = DefaultKey(g.data_dir);
  HttpClient c(g.url, g.api_key);

  for (const Runner& run : groups)
    if (std::optional<int> rc = run(c, g)) return *rc;
  return 0;
}

}  // namespace

// An exception that gets this far (an answer of an unexpected shape, no memory) ends the
// command as any error does: its message on stderr and exit code 1.
int main(int argc, char** argv) {
  try {
    return RunCommand(argc, argv);
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
}
