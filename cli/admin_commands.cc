// `sbx secret`, `usage`, `health` and `version`: the daemon's secrets, billing, liveness and
// the versions of both ends.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

struct SecretCommands {
  CLI::App *secret_set = nullptr, *secret_ls = nullptr, *secret_rm = nullptr;
  std::string secret_name, secret_value;
  bool secret_value_given = false;
  std::vector<std::string> secret_names;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void SecretCommands::Add(CLI::App& app) {
  auto* secret = app.add_subcommand("secret", "daemon secrets, injected as env into sandboxes without --no-env");
  secret->footer("Examples: sbx secret set OPENAI_API_KEY < key.txt\n"
              "          sbx secret ls");
  secret->require_subcommand(1);
  secret_set = secret->add_subcommand("set", "set NAME from --value or, without it, standard input");
  secret_set->footer("Examples: sbx secret set GITHUB_TOKEN --value ghp_example\n"
              "          printf %s \"$TOKEN\" | sbx secret set GITHUB_TOKEN");
  secret_ls = secret->add_subcommand("ls", "list secret names");
  secret_ls->footer("Example: sbx secret ls");
  secret_rm = secret->add_subcommand("rm", "delete secrets");
  secret_rm->footer("Example: sbx secret rm GITHUB_TOKEN");
  secret_set->add_option("name", secret_name)->required();
  secret_set->add_option("--value", secret_value, "the value (visible in the process list: prefer stdin)")
      ->each([this](const std::string&) { secret_value_given = true; });
  secret_rm->add_option("names", secret_names)->required();
}

std::optional<int> SecretCommands::Run(HttpClient& c, const Globals& g) {
  if (*secret_set) {
    if (!secret_value_given) {
      std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      if (!all.empty() && all.back() == '\n') all.pop_back();
      secret_value = all;
    }
    auto j = CallJson(c, "PUT", "/v1/secrets/" + secret_name, json{{"value", secret_value}});
    if (!j) return 1;
    std::printf("%s\n", g.json ? j->dump().c_str() : secret_name.c_str());
    return 0;
  }
  if (*secret_ls) {
    auto j = CallJson(c, "GET", "/v1/secrets");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", (*j)["secrets"].dump().c_str());
      return 0;
    }
    std::printf("%-32s %s\n", "NAME", "UPDATED");
    for (const auto& s : (*j)["secrets"]) std::printf("%-32s %s\n", Str(s, "name").c_str(), Str(s, "updated_at").c_str());
    return 0;
  }
  if (*secret_rm) {
    int rc = 0;
    for (const auto& n : secret_names)
      if (!CallJson(c, "DELETE", "/v1/secrets/" + n)) rc = 1;
    return rc;
  }
  return std::nullopt;
}

struct UsageCommand {
  CLI::App* usage = nullptr;
  std::string usage_from, usage_to, since = "24h";
  bool all_time = false, per_sandbox = false;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void UsageCommand::Add(CLI::App& app) {
  usage = app.add_subcommand("usage", "billed seconds and cost per sandbox, per type and in total");
  usage->add_option("--since", since, "the window: this long before now, as 30m, 24h (the default) or 7d");
  usage->add_option("--from", usage_from, "start of the window (RFC 3339 or Unix seconds; wins over --since)");
  usage->add_option("--to", usage_to, "end of the window (default: now)");
  usage->add_flag("--all-time", all_time, "from the first billed second on");
  usage->add_flag("--sandboxes,-s", per_sandbox, "a line per sandbox too (the default is the summary)");
  usage->footer("Examples: sbx usage                  # the last 24 hours, per type and in total\n"
                "          sbx usage --since 7d -s    # a week, each sandbox too\n"
                "          sbx usage --from 2026-01-01T00:00:00Z --to 2026-02-01T00:00:00Z");
}

// "30m", "24h", "7d", "90s" (or plain seconds) -> seconds; nullopt if it is none of these.
std::optional<int64_t> ParseDuration(const std::string& d) {
  if (d.empty() || d.size() > 12) return std::nullopt;
  size_t digits = d.find_first_not_of("0123456789");
  if (digits == 0) return std::nullopt;
  int64_t n = std::stoll(d.substr(0, digits));
  std::string unit = digits == std::string::npos ? "s" : d.substr(digits);
  int64_t mult = unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
  if (mult == 0 || n <= 0) return std::nullopt;
  return n * mult;
}

std::optional<int> UsageCommand::Run(HttpClient& c, const Globals& g) {
  if (*usage) {
    std::string q;
    if (usage_from.empty() && !all_time) {
      auto secs = ParseDuration(since);
      if (!secs) return Usage("--since wants a duration such as 30m, 24h or 7d, not \"" + since + "\"");
      usage_from = std::to_string(static_cast<int64_t>(std::time(nullptr)) - *secs);
    }
    if (!usage_from.empty()) q += "from=" + PercentEncode(usage_from);
    if (!usage_to.empty()) q += (q.empty() ? "" : "&") + std::string("to=") + PercentEncode(usage_to);
    auto j = CallJson(c, "GET", "/v1/usage" + (q.empty() ? "" : "?" + q));
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", j->dump().c_str());
      return 0;
    }
    std::printf("usage from %s to %s%s\n", Str(*j, "from").c_str(), Str(*j, "to").c_str(),
                per_sandbox ? "" : " (sbx usage -s: each sandbox; --since, --from, --all-time: another window)");
    std::printf("%-20s %-16s %-8s %14s %12s%s\n", "SANDBOX", "NAME", "TYPE", "BILLED_S", "COST_USD",
                per_sandbox ? "     NET_SENT NET_RECEIVED" : "");
    auto bytes = [](const json& o, const char* k) {
      return static_cast<unsigned long long>(o.value("network", json::object()).value(k, uint64_t{0}));
    };
    for (const auto& s : per_sandbox ? (*j)["sandboxes"] : json::array())
      std::printf("%-20s %-16s %-8s %14.3f %12.6f %12llu %12llu\n", Str(s, "id").c_str(), Str(s, "name").c_str(),
                  Str(s, "type").c_str(), s.value("billed_seconds", 0.0), s.value("cost_usd", 0.0), bytes(s, "tx_bytes"),
                  bytes(s, "rx_bytes"));
    for (const auto& [t, v] : (*j)["types"].items())
      std::printf("%-20s %-16s %-8s %14.3f %12.6f\n", "type total", "", t.c_str(), v.value("billed_seconds", 0.0),
                  v.value("cost_usd", 0.0));
    const json& sv = (*j)["serverless"];
    std::printf("serverless calls: %lld, $%.6f\n", static_cast<long long>(sv.value("calls", 0)),
                sv.value("cost_usd", 0.0));
    const json& t = (*j)["total"];
    std::printf("total: %.3f s billed, $%.6f (compute $%.6f); network %llu bytes sent, %llu received\n",
                t.value("billed_seconds", 0.0), t.value("cost_usd", 0.0), t.value("compute_usd", 0.0),
                bytes(t, "tx_bytes"), bytes(t, "rx_bytes"));
    return 0;
  }
  return std::nullopt;
}

struct HealthCommand {
  CLI::App *health = nullptr, *version = nullptr;

  void Add(CLI::App& app) {
    health = app.add_subcommand("health", "check that sbxd answers");
    health->footer("Examples: sbx health\n"
                "          SBX_URL=http://10.0.0.5:7070 sbx health");
    version = app.add_subcommand("version", "the versions of this client and of sbxd");
    version->footer("Example: sbx version");
  }
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

std::optional<int> HealthCommand::Run(HttpClient& c, const Globals& g) {
  if (*version) {
    // The client's own version even when sbxd cannot be reached (then exit 1).
    auto r = c.Call("GET", "/v1/health", "");
    auto why = FailureOf(r);
    auto j = why ? json() : json::parse(r->body, nullptr, false);
    std::string server = j.is_object() ? Str(j, "version") : "-";
    if (g.json) {
      json out = {{"client", SBX_VERSION}, {"server", why ? json(nullptr) : json(server)}};
      if (why) out["error"] = *why;
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("client: sbx %s\nserver: %s\n", SBX_VERSION,
                  why ? ("unreachable (" + *why + ")").c_str() : ("sbxd " + server).c_str());
    }
    return why ? 1 : 0;
  }
  if (*health) {
    auto j = CallJson(c, "GET", "/v1/health");
    if (!j) return 1;
    if (g.json) {
      std::printf("%s\n", j->dump().c_str());
      return 0;
    }
    // "ok, sbxd 0.1.0 (container, microvm; hibernate (microvm), store)": the walls, then
    // what the daemon has (hibernate with the walls that can).
    const nlohmann::json& f = j->contains("features") && (*j)["features"].is_object() ? (*j)["features"] : nlohmann::json::object();
    auto walls = [&](const char* key) {  // a list of walls, joined
      std::string out;
      if (f.contains(key) && f[key].is_array())
        for (const auto& k : f[key])
          if (k.is_string()) out += (out.empty() ? "" : ", ") + k.get<std::string>();
      return out;
    };
    std::string kinds = walls("isolation"), has;
    for (const char* name : {"hibernate", "store"}) {
      if (!f.contains(name) || !f[name].is_boolean() || !f[name].get<bool>()) continue;
      has += (has.empty() ? "" : ", ") + std::string(name);
      if (std::string on = std::string(name) == "hibernate" ? walls("hibernate_isolation") : ""; !on.empty())
        has += " (" + on + ")";
    }
    if (std::string mem = walls("memory_isolation"); !mem.empty())
      has += (has.empty() ? "" : ", ") + std::string("memory templates (") + mem + ")";
    std::string detail = kinds + (has.empty() ? "" : "; " + has);
    std::printf("ok, sbxd %s%s\n", Str(*j, "version").c_str(), detail.empty() ? "" : (" (" + detail + ")").c_str());
    return 0;
  }
  return std::nullopt;
}

}  // namespace

Runner AddSecretCommands(CLI::App& app) { return Register<SecretCommands>(app); }
Runner AddUsageCommand(CLI::App& app) { return Register<UsageCommand>(app); }
Runner AddHealthCommand(CLI::App& app) { return Register<HealthCommand>(app); }

}  // namespace sbx::cli
