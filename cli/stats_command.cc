// `sbx stats`: live CPU, memory and processes per sandbox, as `docker stats`. sbxd gives
// counters (GET /v1/sandboxes/{id}/stats); the CPU share is the change of CPU time between
// two readings over the time between them (100% is one core).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

std::string Mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fMiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

struct StatsCommand {
  CLI::App* stats = nullptr;
  std::vector<std::string> ids;
  bool no_stream = false;

  void Add(CLI::App& app) {
    stats = app.add_subcommand("stats", "live CPU, memory and processes of sandboxes (all running ones by default)");
    stats->add_option("ids", ids, "sandbox ids, names or unique id prefixes");
    stats->add_flag("--no-stream", no_stream, "print one reading and exit (the default when not on a terminal)");
    stats->footer("Example: sbx stats --no-stream my-box");
  }

  // One reading of each sandbox (those that answer), by id.
  std::map<std::string, json> Read(HttpClient& c, const std::vector<std::string>& refs, bool* failed) {
    std::map<std::string, json> out;
    for (const auto& ref : refs) {
      auto r = c.Call("GET", "/v1/sandboxes/" + ref + "/stats");
      if (auto why = FailureOf(r)) {
        ReportError(*why, "client_error");
        *failed = true;
        continue;
      }
      auto j = json::parse(r->body, nullptr, false);
      if (!j.is_object()) continue;
      std::string id = j.value("id", ref);  // before the move below
      out[id] = std::move(j);
    }
    return out;
  }

  static double CpuPercent(const json& a, const json& b) {
    double dt_ns = (b.value("read_at_ms", 0.0) - a.value("read_at_ms", 0.0)) * 1e6;
    double used = b.value("cpu_ns", 0.0) - a.value("cpu_ns", 0.0);
    return dt_ns > 0 && used >= 0 ? 100.0 * used / dt_ns : 0.0;
  }

  std::optional<int> Run(HttpClient& c, const Globals& g) {
    if (!*stats) return std::nullopt;
    std::vector<std::string> refs = ids;
    if (refs.empty()) {
      auto j = CallJson(c, "GET", "/v1/sandboxes?state=running");
      if (!j) return 1;
      for (const auto& s : (*j)["sandboxes"]) refs.push_back(Str(s, "id"));
    }
    const bool stream = !no_stream && !g.json && ::isatty(1);
    bool failed = false;
    auto before = Read(c, refs, &failed);
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(stream ? 1000 : 500));
      auto now = Read(c, refs, &failed);
      if (g.json) {
        json arr = json::array();
        for (auto& [id, s] : now) {
          s["cpu_percent"] = before.count(id) ? CpuPercent(before[id], s) : 0.0;
          arr.push_back(s);
        }
        std::printf("%s\n", arr.dump().c_str());
        return failed ? 1 : 0;
      }
      if (stream) std::printf("\033[H\033[J");  // a fresh screen each second
      std::printf("%-20s %-8s %8s %24s %7s %6s\n", "ID", "STATE", "CPU %", "MEM USAGE / LIMIT", "MEM %", "PIDS");
      for (const auto& [id, s] : now) {
        double cpu = before.count(id) ? CpuPercent(before.at(id), s) : 0.0;
        uint64_t mem = s.value("memory_bytes", uint64_t{0}), lim = s.value("memory_limit_bytes", uint64_t{0});
        std::string usage = Mib(mem) + " / " + Mib(lim);
        std::printf("%-20s %-8s %7.2f%% %24s %6.2f%% %6llu\n", id.c_str(), Str(s, "state").c_str(), cpu, usage.c_str(),
                    lim ? 100.0 * static_cast<double>(mem) / static_cast<double>(lim) : 0.0,
                    static_cast<unsigned long long>(s.value("processes", uint64_t{0})));
      }
      std::fflush(stdout);
      if (!stream) return failed ? 1 : 0;
      before = std::move(now);
    }
  }
};

}  // namespace

Runner AddStatsCommand(CLI::App& app) { return Register<StatsCommand>(app); }

}  // namespace sbx::cli
