// Serverless calls: one command in a fresh sandbox with a disk at /mnt/disk, billed per
// call; the sandbox goes when the command ends and only what it wrote to the disk stays.
// And disk deletion, which waits for the sandboxes that still hold the disk.
#include <chrono>
#include <nlohmann/json.hpp>

#include "base/fault.h"
#include "base/log.h"
#include "base/run_blocking.h"
#include "base/ids.h"
#include "core/layer_files.h"
#include "core/sandbox_manager.h"

namespace sbx::core {

namespace asio = boost::asio;
using nlohmann::json;

namespace {
bool UsesDisk(const storage::SandboxRecord& r, const std::string& disk_id) {
  auto ds = json::parse(r.disks_json, nullptr, false);
  if (ds.is_array())
    for (const auto& d : ds)
      if (d.is_object() && d.value("id", "") == disk_id) return true;
  return false;
}
}  // namespace

std::string SandboxManager::ShellFor(const storage::SandboxRecord& r) const {
  auto layers = LayerPaths(r.layers_json);
  for (const char* p : {"usr/bin/bash", "bin/bash"})
    if (LayerHasFile(layers, p)) return "/bin/bash";
  return "/bin/sh";
}

asio::awaitable<Result<DiskCallResult>> SandboxManager::RunOnDisk(asio::any_io_executor ex, const std::string& disk,
                                                                  const std::string& image, const std::string& from,
                                                                  const std::string& isolation, nlohmann::json network, ExecRequest req, const std::string& shell_cmd,
                                                                  agent::OutputFn on_output) {
  if (!disks_) co_return MakeError(Code::kUnavailable, "disks are not available on this sbxd");
  const int64_t arrival_us = req.arrival_us ? req.arrival_us : SteadyUs();
  CreateRequest creq;
  creq.image = image;
  creq.from = from;
  creq.isolation = isolation;
  creq.no_env = true;
  creq.user = "root";  // a disk call's command runs as root, who owns the disk
  creq.per_call = true;
  creq.ttl_seconds = 600;
  creq.disks = {{disk, "/mnt/disk"}};
  creq.metadata = {{"serverless_disk", disk}};
  creq.network = network;
  std::function<Result<SandboxView>()> create = [this, &creq] { return Create(creq); };
  auto sb = co_await RunBlocking(&blocking_, &create);
  if (!sb.ok()) co_return sb.error();
  FaultPoint("disk_exec.created");
  const std::string sid = sb->rec.id;
  if (!shell_cmd.empty()) req.argv = {ShellFor(sb->rec), "-c", shell_cmd};
  auto res = co_await Exec(ex, sid, std::move(req), on_output);
  (void)Delete(sid);  // the call's sandbox goes at once; its teardown runs behind
  if (!res.ok()) co_return res.error();
  DiskCallResult out;
  out.exec = std::move(*res);
  out.sandbox_id = sid;
  // The disk's id as the call's sandbox recorded it (the request may name the disk).
  auto ds = json::parse(sb->rec.disks_json, nullptr, false);
  out.disk_id = ds.is_array() && !ds.empty() && ds[0].is_object() ? ds[0].value("id", disk) : disk;
  if (Status st = metering_.RecordCall(out.disk_id, sid); !st.ok())
    SBX_LOG(kError) << "recording the serverless call on " << disk << ": " << st.error().message;
  out.cost_usd = metering_.call_usd();
  lat_.disk_exec.ObserveMs((SteadyUs() - arrival_us) / 1000.0);
  co_return out;
}

Status SandboxManager::DeleteDisk(const std::string& id) {
  if (!disks_) return MakeError(Code::kNotFound, "disk " + id + " not found");
  SBX_ASSIGN_OR_RETURN(auto disk, disks_->Get(id));
  // Warm sandboxes waiting with this disk bound give it back first.
  DropPoolIf([&](const PoolKey& k) {
    for (const auto& [d, _] : k.disks)
      if (d == id || d == disk.id || d == disk.name) return true;
    return false;
  });
  {
    // A teardown that still holds the disk is waited for (at most 10 s).
    Lock lock(table_.mu);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      for (const auto& [sid, e] : table_.live())
        if (UsesDisk(e->rec, disk.id))
          return MakeError(Code::kFailedPrecondition, "disk " + disk.id + " is in use by sandbox " + sid);
      bool tearing_down = false;
      for (const auto& [sid, e] : table_.deleting())
        if (UsesDisk(e->rec, disk.id)) tearing_down = true;
      if (!tearing_down || !table_.WaitSettled(lock, deadline)) break;
    }
  }
  return disks_->Delete(disk.id);
}

}  // namespace sbx::core
