#include "api/render.h"

#include <cmath>

#include "api/exec_answer.h"
#include "base/ids.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

json SandboxJson(const core::SandboxView& v) {
  const auto& r = v.rec;
  json j = {{"id", r.id},
            {"name", r.name.empty() ? json(nullptr) : json(r.name)},
            {"state", r.state},
            {"type", r.type},
            {"isolation", r.isolation},
            {"image", r.image},
            {"created_at", FormatRfc3339(r.created_ms)},
            {"expires_at", r.expires_ms && (r.state == "running" || r.state == "paused")
                               ? json(FormatRfc3339(r.expires_ms)) : json(nullptr)},
            {"ttl_seconds", r.ttl_seconds},
            {"ttl_action", r.ttl_action},
            {"idle_timeout_seconds", r.idle_timeout_seconds},
            // What keeps a sandbox from being idle (docs/API.md, "Idle policy").
            {"idle_activity", {"api_calls", "running_execs", "file_transfers", "port_traffic", "captures", "cpu_use"}},
            {"auto_resume", r.auto_resume},
            {"public", r.public_ports},
            {"no_new_privs", r.no_new_privs},
            {"user", r.user.empty() ? "root" : r.user},
            {"pause_mode", r.state == "paused" ? json(r.pause_mode) : json(nullptr)},
            {"paused_at", r.state == "paused" && r.paused_ms ? json(FormatRfc3339(r.paused_ms)) : json(nullptr)},
            {"billing", r.billing == "call" ? "per_call" : "per_second"},
            {"no_env", r.no_env},
            {"resources", {{"cpus", r.cpus}, {"memory_mb", r.memory_mb}, {"disk_mb", r.disk_mb}, {"pids", r.pids},
                           {"network_mbps", v.network_mbps}}},
            {"billed_seconds", v.billed_seconds},
            {"cost_usd", v.cost_usd}};
  auto md = json::parse(r.metadata_json, nullptr, false);
  j["metadata"] = md.is_object() ? md : json::object();
  // The rules as given (normalized), the addresses while it has a link, the bytes so far.
  auto row = json::parse(r.network_json, nullptr, false);
  json net = {{"mode", "none"}, {"allow", json::array()}, {"deny", json::array()}};
  if (row.is_object())
    for (const char* k : {"mode", "allow", "deny"})
      if (row.contains(k)) net[k] = row[k];
  net["address"] = v.address.empty() ? json(nullptr) : json(v.address);
  net["address6"] = v.address6.empty() ? json(nullptr) : json(v.address6);
  net["tx_bytes"] = v.tx_bytes;
  net["rx_bytes"] = v.rx_bytes;
  j["network"] = net;
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  if (r.isolation == "microvm") j["microvm_accel"] = v.accel.empty() ? json(nullptr) : json(v.accel);
  return j;
}

json SnapshotJson(const storage::SnapshotRecord& r) {
  auto layers = json::parse(r.layers_json, nullptr, false);
  return {{"name", r.name},
          {"image", r.image},
          {"parent", r.parent.empty() ? json(nullptr) : json(r.parent)},
          {"source", r.source},
          {"user", r.user.empty() ? "root" : r.user},
          {"size_bytes", r.size_bytes},
          {"layers", layers.is_array() ? layers.size() : 0},
          // Whether it holds its source's memory (and for which wall).
          {"memory", !r.memory.empty()},
          {"memory_isolation", r.memory.empty() ? json(nullptr) : json(r.memory)},
          // Its memory may hold the daemon's secrets: no_env sandboxes cannot start from it.
          {"memory_secrets", r.memory_secrets},
          {"created_at", FormatRfc3339(r.created_ms)}};
}

json DiskJson(const storage::DiskRecord& d, int64_t used) {
  return {{"id", d.id},
          {"name", d.name.empty() ? json(nullptr) : json(d.name)},
          {"size_mb", d.size_mb},
          {"used_bytes", used},
          {"created_at", FormatRfc3339(d.created_ms)}};
}

agent::OutputFn Collector::Fn() const {
  return [o = out, e = err](agent::FrameType t, std::string_view d) -> asio::awaitable<void> {
    if (t == agent::FrameType::kStdout) o->append(d);
    else if (t == agent::FrameType::kStderr) e->append(d);
    co_return;
  };
}

Response Collector::Answer(int status, json head, uint64_t output_cap, bool base64) const {
  return ExecAnswer(status, std::move(head), out, err, 2 * output_cap, base64);
}

json ExitJson(const core::ExecResult& r) {
  json j = {{"exit_code", r.exit.exit_code},
            {"timed_out", r.exit.timed_out},
            {"stdout_truncated", r.exit.stdout_truncated},
            {"stderr_truncated", r.exit.stderr_truncated},
            {"timing", {{"queue_ms", std::round(r.queue_ms_exact * 1000) / 1000},
                        {"execute_ms", std::round(r.execute_ms_exact * 1000) / 1000}}},
            {"cost_usd", r.cost_usd}};
  if (r.exit.signal) j["signal"] = r.exit.signal;
  return j;
}

}  // namespace sbx::api
