// Rows of `sbx bench` beyond one call at a time: creates sent at once, and creates from a
// memory template. Internal to the CLI's bench.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"

namespace sbx::cli {

// `n` creates of `body` sent at once (each on a connection of its own, all connected
// first): how long each took to its answer, in ms; `refused` counts the answers that
// were 429 (sbxd's limit on creates in flight), `failed` any other error. The sandboxes
// made are deleted after.
struct Burst {
  std::vector<double> answered_ms;  // the 201s'
  std::vector<double> refused_ms;   // the 429s'
  int failed = 0;
  std::string failure;  // the first other error
};
Burst BurstCreates(const Globals& g, const nlohmann::json& body, int n);

// Creates from a memory template of a busybox sandbox running a loop (`runs` of them,
// each deleted before the next): ms each, or empty with `why` set when this sbxd cannot
// capture memory on the wall.
std::vector<double> MemoryTemplateCreates(const Globals& g, const std::string& isolation, int runs, std::string* why);

}  // namespace sbx::cli
