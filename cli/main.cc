// sbx: the command-line client. Wiring only: the global flags, each command group's
// subcommands (the *_commands.cc files, see commands.h), and dispatch to the one parsed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>
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
  if (!f.ok()) {
    // Said when sbxd refuses the call for want of a key (a call that needs none goes on).
    SetMissingKeyReason("SBX_API_KEY is unset and the key file " + data_dir + "/api-key cannot be read (" +
                        f.error().message + "); set SBX_API_KEY or --data-dir");
    return "";
  }
  std::string k = *f;
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
  return k;
}

// Edits (insert, delete, replace, swap two neighbours) that turn a into b.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The first word of the command line when it is no command, with the closest command if
// one is close (a typo; empty otherwise).
std::optional<std::pair<std::string, std::string>> UnknownCommand(CLI::App& app, int argc, char** argv) {
  std::string word;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--url", 0) == 0 || a.rfind("--data-dir", 0) == 0) {
      if (a.find('=') == std::string::npos) ++i;  // its value
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    word = a;
    break;
  }
  if (word.empty()) return std::nullopt;
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == word) return std::nullopt;  // a real command: its own error stands
    size_t d = EditDistance(word, sub->get_name());
    if (d < best_d) {
      best_d = d;
      best = sub->get_name();
    }
  }
  if (best_d > std::max<size_t>(2, word.size() / 3)) best.clear();
  return std::make_pair(word, best);
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
  groups.push_back(AddCodeCommand(app));
  groups.push_back(AddSandboxCommands(app));
  groups.push_back(AddStatsCommand(app));
  groups.push_back(AddNetworkCommand(app));
  groups.push_back(AddSecretCommands(app));
  groups.push_back(AddUsageCommand(app));
  groups.push_back(AddSnapshotCommands(app));
  groups.push_back(AddDiskCommands(app));
  groups.push_back(AddImageCommands(app));
  groups.push_back(AddBenchCommands(app));
  groups.push_back(AddHealthCommand(app));
  groups.push_back(AddMcpCommand(app));
  groups.push_back(AddCompletionCommands(app));  // last: it walks the commands above

  // Usage errors exit 2 (as in docker and most tools); an unknown command gets a "did you mean".
  // --json shapes errors too, the command line's own included (it may not have been
  // parsed yet when one is found).
  bool json_asked = false;
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i) json_asked = json_asked || std::string(argv[i]) == "--json";
  SetJsonErrors(json_asked);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    if (auto unknown = UnknownCommand(app, argc, argv)) {
      if (unknown->second.empty())
        return Usage("unknown command \"" + unknown->first + "\" (sbx --help lists them)");
      return Usage("unknown command \"" + unknown->first + "\"; did you mean \"" + unknown->second +
                   "\"? (sbx --help lists them)");
    }
    if (json_asked) return Usage(e.what());
    app.exit(e);
    return 2;
  }
  const char* raw_env = std::getenv("SBX_RAW_OUTPUT");
  SetRawOutput(raw_output || (raw_env && std::string(raw_env) == "1"));
  g.api_key = DefaultKey(g.data_dir);
  HttpClient c(g.url, g.api_key);

  for (const Runner& run : groups)
    if (std::optional<int> rc = run(c, g)) return *rc != 0 && UsageErrorSeen() ? 2 : *rc;
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
