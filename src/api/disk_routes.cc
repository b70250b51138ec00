// The disk routes: create, list, show and delete persistent disks, read and write their
// files from outside, and serverless calls (one command in a fresh sandbox on the disk).
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/render.h"
#include "base/ids.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {
Response NoDisks() { return ErrorResponse(Code::kUnavailable, "disks are not available on this sbxd"); }
}  // namespace

asio::awaitable<Response> Api::CreateDisk(Request& req) {
  if (!disks_) co_return NoDisks();
  auto j = ParseObject(req.body, {"name", "size_mb"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  if (Status space = manager_->admission().CheckDataDirSpace(); !space.ok()) co_return ErrorResponse(space.error());
  auto name = GetName(*j, "name");
  auto size = GetInt(*j, "size_mb");
  if (!name.ok()) co_return ErrorResponse(name.error());
  if (!size.ok()) co_return ErrorResponse(size.error());
  int64_t mb = size->value_or(1024);
  std::function<Result<storage::DiskRecord>()> fn = [this, &name, mb]() -> Result<storage::DiskRecord> {
    auto made = disks_->Create(*name, mb);
    if (!made.ok()) return OnDataDir(made.error());
    return made;
  };
  auto d = co_await RunBlocking(pool_, &fn);
  if (!d.ok()) co_return ErrorResponse(d.error());
  co_return Json(201, DiskJson(*d, disks_->UsedBytes(d->id)));
}

asio::awaitable<Response> Api::ListDisks(Request&) {
  if (!disks_) co_return NoDisks();
  auto list = disks_->List();
  if (!list.ok()) co_return ErrorResponse(list.error());
  json arr = json::array();
  for (const auto& d : *list) arr.push_back(DiskJson(d, disks_->UsedBytes(d.id)));
  co_return Json(200, {{"disks", arr}});
}

asio::awaitable<Response> Api::GetDisk(Request& req) {
  if (!disks_) co_return NoDisks();
  auto d = disks_->Get(req.params["id"]);
  if (!d.ok()) co_return ErrorResponse(d.error());
  co_return Json(200, DiskJson(*d, disks_->UsedBytes(d->id)));
}

asio::awaitable<Response> Api::DeleteDisk(Request& req) {
  if (!disks_) co_return NoDisks();
  std::string id = req.params["id"];
  std::function<Status()> fn = [this, &id] { return manager_->DeleteDisk(id); };
  auto st = co_await RunBlocking(pool_, &fn);
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"type", "disk.deleted"}, {"id", id}});
}

asio::awaitable<Response> Api::ReadDiskFile(Request& req) {
  if (!disks_) co_return NoDisks();
  auto q = req.query.find("path");
  if (q == req.query.end() || q->second.empty()) co_return Bad("the path query parameter is required");
  std::string id = req.params["id"], path = q->second;
  std::function<Result<std::string>()> fn = [this, &id, &path] { return disks_->ReadFile(id, path, 64 << 20); };
  auto data = co_await RunBlocking(pool_, &fn);
  if (!data.ok()) co_return ErrorResponse(data.error());
  Response r;
  r.content_type = "application/octet-stream";
  r.body = std::move(*data);
  co_return r;
}

asio::awaitable<Response> Api::WriteDiskFile(Request& req) {
  if (!disks_) co_return NoDisks();
  auto q = req.query.find("path");
  if (q == req.query.end() || q->second.empty()) co_return Bad("the path query parameter is required");
  std::string id = req.params["id"], path = q->second;
  std::function<Status()> fn = [this, &id, &path, &req] { return disks_->WriteFile(id, path, req.body); };
  auto st = co_await RunBlocking(pool_, &fn);
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"path", path}, {"size_bytes", req.body.size()}});
}

asio::awaitable<Response> Api::DiskExec(Request& req) {
  if (!disks_) co_return NoDisks();
  // A serverless call: a fresh sandbox with the disk at /mnt/disk, one command, gone.
  auto j = ParseObject(req.body, {"cmd", "cwd", "env", "timeout_seconds", "image", "from", "encoding", "network", "isolation"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  const json network = j->contains("network") ? (*j)["network"] : json();
  auto b64 = GetBase64Encoding(*j);
  if (!b64.ok()) co_return ErrorResponse(b64.error());
  const bool base64 = *b64;
  core::ExecRequest e;
  e.arrival_us = req.arrival_us;
  std::string shell_cmd;  // a string command runs with the image's bash (or sh)
  if (auto st = ParseCmd(*j, &shell_cmd, &e.argv); !st.ok()) co_return ErrorResponse(st.error());
  auto cwd = GetString(*j, "cwd", "/mnt/disk");
  auto env = GetStringMap(*j, "env");
  auto timeout = GetInt(*j, "timeout_seconds");
  auto image = GetString(*j, "image");
  auto from = GetString(*j, "from");
  auto isolation = GetString(*j, "isolation");
  for (const Error* err : {cwd.ok() ? nullptr : &cwd.error(), env.ok() ? nullptr : &env.error(),
                           timeout.ok() ? nullptr : &timeout.error(), image.ok() ? nullptr : &image.error(),
                           from.ok() ? nullptr : &from.error(), isolation.ok() ? nullptr : &isolation.error()})
    if (err) co_return ErrorResponse(*err);
  e.timeout_seconds = timeout->value_or(300);
  if (e.timeout_seconds < 1 || e.timeout_seconds > 300) co_return Bad("timeout_seconds must be between 1 and 300");
  e.cwd = *cwd;
  e.env = *env;
  e.cancel = req.client_gone;  // a client that goes away stops the call
  std::string id = req.params["id"];
  Collector out;
  agent::OutputFn collect = out.Fn();
  auto ex = co_await asio::this_coro::executor;
  auto res = co_await manager_->RunOnDisk(ex, id, *image, *from, *isolation, network, std::move(e), shell_cmd,
                                          collect);
  if (!res.ok()) co_return ErrorResponse(res.error());
  json body = ExitJson(res->exec);
  body["cost_usd"] = res->cost_usd;
  if (res->exec.exit.timed_out) {
    // Past the limit the whole tree is gone; the answer still carries what it printed.
    body["error"] = {{"code", ErrorCode(Code::kDeadlineExceeded)}, {"message", "Exec timed out"}};
    co_return out.Answer(HttpStatus(Code::kDeadlineExceeded), std::move(body), manager_->output_cap(), base64);
  }
  co_return out.Answer(200, std::move(body), manager_->output_cap(), base64);
}

}  // namespace sbx::api
