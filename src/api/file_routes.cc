// The files and archive routes: each request is one kFileOp to the sandbox's agent
// (agent/files.h), which resolves every path inside the sandbox.
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>

#include "agent/client.h"
#include "api/decode.h"
#include "api/file_ops.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "base/ids.h"
#include "base/unique_fd.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr size_t kUploadChunk = 1 << 20;  // at most agent::kMaxPayload

Result<bool> BoolParam(const Request& req, const std::string& name, bool dflt) {
  auto it = req.query.find(name);
  if (it == req.query.end() || it->second.empty()) return dflt;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return MakeError(Code::kInvalidArgument, name + " must be true or false");
}

// The entry JSON of the agent with its mtime as RFC 3339.
json ShowEntry(json e) {
  if (e.is_object() && e.contains("mtime_ms") && e["mtime_ms"].is_number_integer()) {
    e["mtime"] = FormatRfc3339(e["mtime_ms"].get<int64_t>());
    e.erase("mtime_ms");
  }
  return e;
}

// Sends the request frame and waits for the agent's first answer.
asio::awaitable<Result<json>> Begin(agent::Conn* conn, const agent::DialerPtr& addr, const json* op) {
  agent::DialerPtr to = addr;  // a named local: see g++ 12 and co_await temporaries
  auto st = co_await conn->Open(to);
  if (!st.ok()) co_return st.error();
  std::string payload = op->dump(-1, ' ', false, json::error_handler_t::replace);
  st = co_await conn->Send(agent::FrameType::kFileOp, payload);
  if (!st.ok()) co_return st.error();
  auto r = co_await conn->RecvResult();
  if (!r.ok()) co_return r.error();
  json j = json::parse(*r, nullptr, false);
  if (j.is_discarded()) co_return MakeError(Code::kInternal, "the sandbox's agent sent a malformed answer");
  co_return j;
}


}  // namespace

Response StreamData(std::shared_ptr<agent::Conn> conn, std::shared_ptr<core::AgentLease> lease,
                    const char* content_type, std::string first) {
  Response r;
  r.content_type = content_type;
  r.stream = [conn, lease, first](ChunkSink sink) -> asio::awaitable<std::optional<Response>> {
    if (!first.empty()) {
      std::string_view head = first;
      if (!co_await sink(head)) co_return std::nullopt;
    }
    while (true) {
      auto f = co_await conn->Recv();
      if (!f.ok()) co_return ErrorResponse(f.error());  // cuts the body short: the client sees it
      if (f->type == agent::FrameType::kDataEnd) co_return std::nullopt;
      if (f->type != agent::FrameType::kData)
        co_return ErrorResponse(MakeError(Code::kInternal, "unexpected frame from the sandbox's agent"));
      std::string_view data = f->payload;
      if (!co_await sink(data)) co_return std::nullopt;  // the client left; the agent stops on its own
    }
  };
  return r;
}

asio::awaitable<Status> SendUploadPiece(agent::Conn* conn, std::string piece) {
  co_return co_await conn->Send(agent::FrameType::kData, std::move(piece));
}

asio::awaitable<Result<json>> EndUpload(agent::Conn* conn, Status sent) {
  if (sent.ok()) {
    std::string none;
    sent = co_await conn->Send(agent::FrameType::kDataEnd, std::move(none));
  }
  // If the agent stopped reading (a refusal), its answer is still there to read.
  auto r = co_await conn->RecvResult();
  if (!r.ok()) co_return sent.ok() ? r.error() : (r.error().code == Code::kUnavailable ? sent.error() : r.error());
  json j = json::parse(*r, nullptr, false);
  if (j.is_discarded()) co_return MakeError(Code::kInternal, "the sandbox's agent sent a malformed answer");
  co_return j;
}

asio::awaitable<Result<json>> Upload(agent::Conn* conn, const std::string* body_file, std::string_view body) {
  UniqueFd fd;
  if (!body_file->empty()) {
    fd.Reset(::open(body_file->c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) co_return MakeError(Code::kInternal, "cannot read the stored upload");
  }
  size_t off = 0;
  Status sent = OkStatus();
  while (sent.ok()) {
    std::string chunk;
    if (fd.valid()) {
      chunk.resize(kUploadChunk);
      ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
      if (n < 0) co_return MakeError(Code::kInternal, "cannot read the stored upload");
      chunk.resize(n);
    } else {
      chunk = std::string(body.substr(off, kUploadChunk));
      off += chunk.size();
    }
    if (chunk.empty()) break;
    sent = co_await SendUploadPiece(conn, std::move(chunk));
  }
  co_return co_await EndUpload(conn, sent);
}

asio::awaitable<Result<FileOp>> Api::StartFileOp(const std::string& id, json op) {
  auto lease = co_await manager_->AcquireAgent(id);
  if (!lease.ok()) co_return lease.error();
  FileOp f;
  f.lease = *lease;
  const std::string kind = op.value("op", "");
  if (kind == "write" || kind == "archive_put") op["max_bytes"] = f.lease->disk_bytes();
  if (!op.contains("user") || op["user"] == "") {
    const std::string& u = f.lease->user();
    if (u.empty() || u == "root" || u == "0")
      op.erase("user");
    else
      op["user"] = u;  // the sandbox's default
  }
  auto ex = co_await asio::this_coro::executor;
  f.conn = std::make_shared<agent::Conn>(ex);
  auto first = co_await Begin(f.conn.get(), f.lease->addr(), &op);
  if (!first.ok()) co_return first.error();
  f.first = std::move(*first);
  co_return f;
}

asio::awaitable<Response> Api::Files(Request& req) {
  const std::string& pat = req.pattern;
  const std::string id = req.params["id"];
  const std::string& m = req.method;
  json op;
  std::string path = req.query.count("path") ? req.query.at("path") : "";
  if (pat == "/v1/sandboxes/{id}/files/mkdir" || pat == "/v1/sandboxes/{id}/files/move") {
    bool mk = pat.back() == 'r';
    auto j = mk ? ParseObject(req.body, {"path", "parents"}) : ParseObject(req.body, {"from", "to", "overwrite"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    for (const char* k : {"path", "from", "to"})
      if (j->contains(k) && !(*j)[k].is_string()) co_return Bad(std::string(k) + " must be a string");
    for (const char* k : {"parents", "overwrite"})
      if (j->contains(k) && !(*j)[k].is_boolean()) co_return Bad(std::string(k) + " must be true or false");
    op = *j;
    op["op"] = mk ? "mkdir" : "move";
  } else {
    if (path.empty()) co_return Bad("the path query parameter is required");
    op = {{"path", path}};
    if (pat == "/v1/sandboxes/{id}/files/list") {
      op["op"] = "list";
      if (req.query.count("depth")) {
        const std::string& d = req.query.at("depth");
        if (d.empty() || d.size() > 3 || d.find_first_not_of("0123456789") != std::string::npos)
          co_return Bad("depth must be a small positive integer");
        op["depth"] = std::stoi(d);
      }
    } else if (pat == "/v1/sandboxes/{id}/files/stat") {
      op["op"] = "stat";
    } else if (pat == "/v1/sandboxes/{id}/files/watch") {
      auto rec = BoolParam(req, "recursive", false);
      if (!rec.ok()) co_return ErrorResponse(rec.error());
      op["op"] = "watch";
      op["recursive"] = *rec;
      op["keepalive_ms"] = manager_->keepalive_ms();
    } else if (pat == "/v1/sandboxes/{id}/archive") {
      op["op"] = m == "GET" ? "archive_get" : "archive_put";
    } else if (m == "GET") {
      op["op"] = "read";
    } else if (m == "DELETE") {
      auto rec = BoolParam(req, "recursive", false);
      if (!rec.ok()) co_return ErrorResponse(rec.error());
      op["op"] = "remove";
      op["recursive"] = *rec;
    } else {
      auto parents = BoolParam(req, "parents", true);
      if (!parents.ok()) co_return ErrorResponse(parents.error());
      op["op"] = "write";
      op["parents"] = *parents;
      if (req.query.count("mode")) {
        const std::string& mode = req.query.at("mode");
        if (mode.empty() || mode.size() > 5 || mode.find_first_not_of("01234567") != std::string::npos)
          co_return Bad("mode must be octal, such as 644 or 0755");
        op["mode"] = std::stoi(mode, nullptr, 8);
      }
    }
  }
  // Who the operation runs as in the sandbox (the sandbox's default user if none).
  if (auto u = req.query.find("user"); u != req.query.end()) {
    if (u->second.empty() || u->second.size() > 256) co_return Bad("user must be a user name or uid of the sandbox");
    op["user"] = u->second;
  }
  const std::string kind = op["op"];
  auto started = co_await StartFileOp(id, op);
  if (!started.ok()) co_return ErrorResponse(started.error());
  std::shared_ptr<agent::Conn> conn = started->conn;
  std::shared_ptr<core::AgentLease> held = started->lease;
  const json* first = &started->first;
  if (kind == "read") co_return StreamData(conn, held, "application/octet-stream");
  if (kind == "archive_get") co_return StreamData(conn, held, "application/x-tar");
  if (kind == "watch") {
    // A watch is quiet for long stretches: its client leaving is noticed at once (not at
    // the next keep-alive), and ends the agent's watch with the connection.
    if (req.client_gone)
      req.client_gone->OnFire([conn] {
        asio::post(conn->socket().get_executor(), [conn] {
          boost::system::error_code ignored;
          conn->socket().close(ignored);
        });
      });
    // The watch is in place once the agent answered: the first line says so.
    json watching = {{"type", "watching"}, {"path", path}, {"recursive", op["recursive"]}};
    co_return StreamData(conn, held, "application/x-ndjson", watching.dump() + "\n");
  }
  if (kind == "write" || kind == "archive_put") {
    auto done = co_await Upload(conn.get(), &req.body_file, req.body);
    if (!done.ok()) co_return ErrorResponse(done.error());
    json out = *done;
    out["type"] = kind == "write" ? "file.written" : "archive.extracted";
    if (kind == "write") {
      out["size_bytes"] = out.value("size", 0);
      out.erase("size");
    }
    if (kind == "archive_put") out["path"] = path;
    co_return Json(200, out);
  }
  json out = *first;
  if (kind == "list") {
    for (auto& e : out["entries"]) e = ShowEntry(e);
    co_return Json(200, out);
  }
  if (kind == "stat") co_return Json(200, ShowEntry(out));
  if (kind == "remove") co_return Json(200, {{"type", "file.deleted"}, {"path", path}});
  if (kind == "mkdir") co_return Json(200, {{"type", "folder.created"}, {"path", op["path"]}, {"created", out.value("created", false)}});
  co_return Json(200, {{"type", "file.moved"}, {"from", op["from"]}, {"to", op["to"]}});
}

}  // namespace sbx::api
