// Named snapshots (templates) and images.
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

asio::awaitable<Response> Api::ListSnapshots(Request& req) {
  auto list = manager_->ListSnapshots();
  if (!list.ok()) co_return ErrorResponse(list.error());
  json arr = json::array();
  for (const auto& r : *list) arr.push_back(SnapshotJson(r));
  co_return Json(200, {{"snapshots", arr}});
}

asio::awaitable<Response> Api::GetSnapshot(Request& req) {
  std::string name = req.params["name"];
  auto rec = manager_->GetSnapshot(name);
  if (!rec.ok()) co_return ErrorResponse(rec.error());
  co_return Json(200, SnapshotJson(*rec));
}

asio::awaitable<Response> Api::DeleteSnapshot(Request& req) {
  std::string name = req.params["name"];
  std::function<Status()> fn = [this, &name] { return manager_->DeleteSnapshot(name); };
  auto st = co_await RunBlocking(pool_, &fn);
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"type", "snapshot.named.deleted"}, {"name", name}});
}

asio::awaitable<Response> Api::ListImages(Request& req) {
  auto list = images_->List();
  if (!list.ok()) co_return ErrorResponse(list.error());
  json arr = json::array();
  for (const auto& i : *list)
    arr.push_back({{"name", i.name}, {"size_bytes", i.size_bytes}, {"created_at", FormatRfc3339(i.created_ms)}});
  co_return Json(200, {{"images", arr}});
}

asio::awaitable<Response> Api::ImportImage(Request& req) {
  std::string name = req.params["name"];
  std::string file = req.body_file;
  if (file.empty()) co_return Bad("the body must be a tar archive");
  std::function<Result<storage::ImageRecord>()> fn = [this, &name, &file] {
    return images_->ImportTar(name, file);
  };
  auto rec = co_await RunBlocking(pool_, &fn);
  if (!rec.ok()) co_return ErrorResponse(rec.error());
  co_return Json(201, {{"name", rec->name}, {"size_bytes", rec->size_bytes}, {"created_at", FormatRfc3339(rec->created_ms)}});
}

asio::awaitable<Response> Api::DeleteImage(Request& req) {
  std::string name = req.params["name"];
  std::function<Status()> fn = [this, &name] { return manager_->DeleteImage(name); };
  auto st = co_await RunBlocking(pool_, &fn);
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"type", "image.deleted"}, {"name", name}});
}

}  // namespace sbx::api
