// How sbxd's core is configured (daemon/main.cc fills it from flags; unit tests set
// what they test).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/admission.h"

namespace sbx::core {

struct ManagerOptions {
  std::string data_dir;
  std::string default_image = "default";
  std::string default_isolation = "container";  // a create's that names none
  uint64_t output_cap = 16 << 20;
  // A streamed exec or process output sends a keep-alive after this long without output.
  int64_t keepalive_ms = 15000;
  int64_t default_ttl_seconds = 3600;
  int64_t max_ttl_seconds = 30 * 24 * 3600;
  int64_t max_exec_timeout_seconds = 24 * 3600;
  int teardown_threads = 2;
  // Creates under way at once (CreateCall); more are refused at once with 429 and a retry
  // hint rather than queued (0: no limit).
  int max_creates_in_flight = 32;
  std::string default_cwd = "/root";  // empty: the agent's own working directory
  std::map<std::string, std::string> base_env = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", "/root"},
      {"LANG", "C.UTF-8"},
      {"TERM", "xterm"}};
  // Warm pool: this many booted, warmed sandboxes are kept ready per image or snapshot
  // created from within the last pool_keep_ms (0: no pool).
  int pool_size = 0;
  double serverless_call_usd = 0.05 / 1000;  // price of one serverless call on a disk
  int64_t pool_keep_ms = 10 * 60 * 1000;
  Quotas quotas;
  // New work (create, start, snapshot, fork, disks) is refused with 503 while the data
  // dir's file system has less than this free.
  int64_t min_free_mb = 64;
  // The store (empty: none): its mount, size and overcommit ratio (core/store_budget.h).
  std::string store_dir;
  int64_t store_mb = 0;
  double store_overcommit = 0;
  // Idle policy: a sandbox using more than this share of one CPU is busy.
  double idle_cpu_threshold = 0.05;
  std::function<int64_t()> now_ms;  // wall clock (tests drive it); default: real time
  // A create's network mode when it names none ("none" or "outbound").
  std::string default_network = "none";
  // 32 raw bytes: seals daemon secrets at rest and signs sandbox tokens. Empty: secrets
  // and tokens are off (unit tests).
  std::string secret_key;
};

}  // namespace sbx::core
