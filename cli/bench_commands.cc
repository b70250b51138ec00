// `sbx bench` and its rows (`patterns`, `disk-exec`, `hibernate`): parsing and dispatch;
// the measurements are in bench.cc, bench_hibernate.cc and templates.cc.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "commands.h"

namespace sbx::cli {
namespace {

struct BenchCommands {
  CLI::App *bench = nullptr, *bench_patterns = nullptr, *bench_disk = nullptr, *bench_hib = nullptr;
  int runs = 50;
  std::string bench_image = "busybox";
  bool no_peers = false;
  int pattern_runs = 5;
  int pattern_gap = 0;
  int disk_runs = 50;
  int disk_gap = 0;
  int hib_runs = 10;
  std::string hib_criu, hib_isolation;
  std::string bench_isolation;

  void Add(CLI::App& app);
  std::optional<int> Run(HttpClient& c, const Globals& g);
};

void BenchCommands::Add(CLI::App& app) {
  bench = app.add_subcommand("bench", "measure create, exec and delete against peer tools");
  bench->footer("Examples: sbx bench --runs 20\n"
              "          sbx bench --isolation gvisor --runs 20\n"
              "          sbx bench patterns --runs 5");
  bench_patterns = bench->add_subcommand("patterns", "the three tool-call patterns, timed (seed experiment)");
  bench_patterns->footer("Example: sbx bench patterns --runs 5 --gap-ms 500");
  bench_patterns->add_option("--runs", pattern_runs, "calls per pattern (default 5)");
  bench_patterns->add_option("--gap-ms", pattern_gap, "think time before each call (default 0)");
  bench_disk = bench->add_subcommand("disk-exec", "serverless calls on a disk; a test suite against the host");
  bench_disk->footer("Example: sbx bench disk-exec --runs 50");
  bench_disk->add_option("--runs", disk_runs, "calls of `true` (default 50)");
  bench_disk->add_option("--gap-ms", disk_gap, "think time between calls (default 0: back to back)");
  bench_hib = bench->add_subcommand("hibernate", "hibernate and restore a sandbox holding ~100 MB, beside CRIU alone");
  bench_hib->footer("Example: sbx bench hibernate --runs 10");
  bench_hib->add_option("--runs", hib_runs, "cycles (default 10)");
  bench_hib->add_option("--criu", hib_criu, "CRIU binary for the floor (default $SBX_CRIU, else the build cache's)");
  bench_hib->add_option("--isolation", hib_isolation, "the sandbox's wall (default: sbxd's); CRIU's floor is the container wall's");
  bench->add_option("--runs", runs, "samples per row (default 50)");
  bench->add_option("--image", bench_image, "image for sandboxes (default busybox)");
  bench->add_option("--isolation", bench_isolation,
                    "the sandboxes' wall: container or gvisor (default: sbxd's); gvisor adds runsc's own rows");
  bench->add_flag("--no-peers", no_peers, "skip the peer tools");
}

std::optional<int> BenchCommands::Run(HttpClient& c, const Globals& g) {
  if (*bench_patterns) return RunBenchPatterns(g, pattern_runs, pattern_gap);
  if (*bench_disk) return RunBenchDiskExec(g, disk_runs, g.data_dir, disk_gap);
  if (*bench_hib) {
    if (hib_criu.empty()) {
      const char* env = std::getenv("SBX_CRIU");
      const char* cache = std::getenv("SBX_CACHE_DIR");
      hib_criu = env && *env ? env : std::string(cache && *cache ? cache : "/var/cache/sbx") + "/criu/criu";
      if (::access(hib_criu.c_str(), X_OK) != 0) hib_criu.clear();  // no floor row then
    }
    return RunBenchHibernate(g, hib_runs, g.data_dir, hib_criu, hib_isolation);
  }
  if (*bench) return RunBench(g, runs, bench_image, bench_isolation, !no_peers);
  return std::nullopt;
}

}  // namespace

Runner AddBenchCommands(CLI::App& app) { return Register<BenchCommands>(app); }

}  // namespace sbx::cli
