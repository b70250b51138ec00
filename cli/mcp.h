// `sbx mcp`: a Model Context Protocol server whose tools are sbx's sandboxes, disks and
// snapshots. mcp_tools.cc holds the tools (each a call or two to sbxd's API); mcp.cc the
// JSON-RPC side (initialize, tools/list, tools/call, ping) and its two transports, stdio
// and streamable HTTP. Any thread: each tool call opens its own connection to sbxd.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli.h"

namespace sbx::cli::mcp {

// What every sandbox the tools make gets, whatever a tool call asks for: the daemon's
// secrets only with `env` (`sbx mcp --env`; by default MCP-made sandboxes are no_env), and
// the network mode `network` (`sbx mcp --network`): "none" holds every one to none,
// "outbound" is the mode of a call that names none, "" leaves that to the daemon's default.
struct SandboxPolicy {
  bool env = false;
  std::string network;
};
// Set once, before the server serves (the tools read it from any thread after).
void SetSandboxPolicy(SandboxPolicy policy);

// The tools as tools/list describes them: name, title, description, inputSchema.
nlohmann::json ToolList();

// Runs tool `name` with `args` against sbxd: a CallToolResult (content, structuredContent,
// isError; a failure of sbxd or of the arguments is an isError result, never an
// exception). nullopt when there is no tool of that name.
std::optional<nlohmann::json> CallTool(const Globals& g, const std::string& name, const nlohmann::json& args);

}  // namespace sbx::cli::mcp
