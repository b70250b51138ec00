// The CLI's subcommands, by group, and the helpers their files share. Main thread only.
//
// Each Add* function registers its group's subcommands on the app (in the order that
// `sbx --help` lists them: main.cc calls them in that order) and returns the group's Runner.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "http_client.h"

namespace CLI {
class App;
}

namespace sbx::cli {

// Runs whichever of its group's subcommands was parsed: that command's exit code, or
// nullopt when the command line named none of them.
using Runner = std::function<std::optional<int>(HttpClient& c, const Globals& g)>;

// A group is a struct holding its options, with Add(CLI::App&) to register them and
// Run(HttpClient&, const Globals&) to act on them; the runner keeps the struct alive.
template <typename Group>
Runner Register(CLI::App& app) {
  auto group = std::make_shared<Group>();
  group->Add(app);
  return [group](HttpClient& c, const Globals& g) { return group->Run(c, g); };
}

// sandbox_commands.cc
Runner AddCreateCommand(CLI::App& app);    // create
Runner AddSandboxCommands(CLI::App& app);  // ls, get, rm, stop, start, pause, resume
// exec_commands.cc
Runner AddExecCommands(CLI::App& app);  // exec, cp, port, ps, spawn, logs
// stats_command.cc
Runner AddStatsCommand(CLI::App& app);  // stats
// network_command.cc
Runner AddNetworkCommand(CLI::App& app);  // network
// --allow and --deny (create, network), and the `network` object they make.
void AddNetworkRuleOptions(CLI::App* cmd, std::vector<std::string>* allow, std::vector<std::string>* deny);
nlohmann::json NetworkBody(const std::string& mode, const std::vector<std::string>& allow,
                           const std::vector<std::string>& deny);
// snapshot_commands.cc
Runner AddSnapshotCommands(CLI::App& app);  // snapshot, fork, template
Runner AddImageCommands(CLI::App& app);     // image
// disk_commands.cc
Runner AddDiskCommands(CLI::App& app);  // disk (and its serverless exec)
// admin_commands.cc
Runner AddSecretCommands(CLI::App& app);  // secret
Runner AddUsageCommand(CLI::App& app);    // usage
Runner AddHealthCommand(CLI::App& app);   // health
// code_command.cc
Runner AddCodeCommand(CLI::App& app);  // run
// mcp.cc
Runner AddMcpCommand(CLI::App& app);  // mcp
// completion.cc
Runner AddCompletionCommands(CLI::App& app);  // completion, man
// bench_commands.cc
Runner AddBenchCommands(CLI::App& app);  // bench and its rows

// copy.cc: `sbx cp SRC DST` (exactly one side ID:/path), with docker cp's rules.
int CopyFiles(HttpClient& c, const std::string& src, const std::string& dst, const std::string& user);

// Prints "sbx: MSG" on stderr, or with --json (SetJsonErrors) one line
// {"error":{"code","message"}}: the code of sbxd's answer when the failure was one
// (LastErrorCode), else `fallback_code` ("unavailable" for an unreachable sbxd).
void ReportError(const std::string& msg, const std::string& fallback_code);
void SetJsonErrors(bool on);
// ReportError(MSG, "client_error"); returns the exit code 1.
int Fail(const std::string& msg);
// The same for a command line that is wrong (a bad flag value): "invalid_request", exit code 2.
int Usage(const std::string& msg);
// j[k] if it is a string, else "-" (for table cells).
std::string Str(const nlohmann::json& j, const char* k);
// For query values: everything but unreserved characters as %XX ("+" in offsets too).
std::string PercentEncode(const std::string& v);

}  // namespace sbx::cli
