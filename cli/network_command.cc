// `sbx network ID`: a sandbox's network (its rules, address and bytes), and with
// --mode/--allow/--deny its new rules (PATCH /v1/sandboxes/{id}/network: they replace the
// old ones whole; new connections follow them at once).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

std::string List(const json& j) {
  std::string out;
  if (j.is_array())
    for (const auto& e : j)
      if (e.is_string()) out += (out.empty() ? "" : " ") + e.get<std::string>();
  return out.empty() ? "-" : out;
}

struct NetworkCommand {
  CLI::App* network = nullptr;
  std::string id, mode;
  std::vector<std::string> allow, deny;

  void Add(CLI::App& app) {
    network = app.add_subcommand("network", "show a sandbox's network, or replace its rules");
    network->add_option("id", id, "sandbox id, name or unique id prefix")->required();
    network->add_option("--mode", mode, "none (loopback only) or outbound (default)");
    AddNetworkRuleOptions(network, &allow, &deny);
    network->footer(
        "Examples:\n"
        "  sbx network my-box                                   # its rules, address and bytes\n"
        "  sbx network my-box --allow pypi.org --allow '*.pythonhosted.org'\n"
        "  sbx network my-box --mode none                       # cut it off\n"
        "Rules replace the old ones whole; new connections follow them at once.");
  }

  std::optional<int> Run(HttpClient& c, const Globals& g) {
    if (!*network) return std::nullopt;
    const bool change = network->count("--mode") || !allow.empty() || !deny.empty();
    std::optional<json> j;
    if (change) {
      j = CallJson(c, "PATCH", "/v1/sandboxes/" + PercentEncode(id) + "/network",
                   NetworkBody(mode, allow, deny));
    } else {
      j = CallJson(c, "GET", "/v1/sandboxes/" + PercentEncode(id));
    }
    if (!j) return 1;
    const json net = j->value("network", json::object());
    if (g.json) {
      std::printf("%s\n", net.dump().c_str());
      return 0;
    }
    std::printf("mode:     %s\n", Str(net, "mode").c_str());
    std::printf("allow:    %s\n", List(net.value("allow", json::array())).c_str());
    std::printf("deny:     %s\n", List(net.value("deny", json::array())).c_str());
    std::printf("address:  %s\n", net.contains("address") && net["address"].is_string() ? Str(net, "address").c_str() : "-");
    std::printf("sent:     %llu bytes\nreceived: %llu bytes\n",
                static_cast<unsigned long long>(net.value("tx_bytes", uint64_t{0})),
                static_cast<unsigned long long>(net.value("rx_bytes", uint64_t{0})));
    return 0;
  }
};

}  // namespace

void AddNetworkRuleOptions(CLI::App* cmd, std::vector<std::string>* allow, std::vector<std::string>* deny) {
  // One value per flag (`--allow a --allow b`), so that a sandbox id after it stays an id.
  cmd->add_option("--allow", *allow,
                  "only this is reachable: a CIDR or a domain name (*.example.com for any name below it); repeatable")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--deny", *deny, "never this (a CIDR or a domain name; wins over --allow); repeatable")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

json NetworkBody(const std::string& mode, const std::vector<std::string>& allow, const std::vector<std::string>& deny) {
  json body = json::object();
  if (!mode.empty()) body["mode"] = mode;
  if (!allow.empty()) body["allow"] = allow;
  if (!deny.empty()) body["deny"] = deny;
  return body;
}

Runner AddNetworkCommand(CLI::App& app) { return Register<NetworkCommand>(app); }

}  // namespace sbx::cli
