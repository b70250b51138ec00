// The E2B front's files (E2B's envd): filesystem.Filesystem's Connect calls and the plain
// GET/POST /files. Each is one or two file operations in the sandbox's agent
// (agent/files.h), as the user the call names and with paths that are not absolute taken
// from that user's home, as envd does. docs/e2b.md has the mapping.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cctype>
#include <boost/asio/this_coro.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/e2b_connect.h"
#include "api/multipart.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "base/ids.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// Files in one multipart upload, at most.
constexpr size_t kMaxParts = 1000;

// Go's FileMode.String() of an entry, as envd reports it: "drwxr-xr-x", "-rw-r--r--",
// "Lrwxrwxrwx".
std::string Permissions(const std::string& type, uint32_t mode) {
  std::string s = type == "dir" ? "d" : type == "symlink" ? "L" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (0400u >> i)) ? rwx[i] : '-';
  return s;
}

// An agent's entry as envd's EntryInfo (protobuf JSON: enum names, int64 as a string).
json EntryInfo(const json& e) {
  const std::string type = e.value("type", "");
  const uint32_t mode = e.value("mode", 0u);
  json out = {{"name", e.value("name", "")},
              {"type", type == "file"      ? "FILE_TYPE_FILE"
                       : type == "dir"     ? "FILE_TYPE_DIRECTORY"
                       : type == "symlink" ? "FILE_TYPE_SYMLINK"
                                           : "FILE_TYPE_UNSPECIFIED"},
              {"path", e.value("path", "")},
              {"size", std::to_string(e.value("size", int64_t{0}))},
              {"mode", mode},
              {"permissions", Permissions(type, mode)},
              {"owner", e.value("owner", "")},
              {"group", e.value("group", "")}};
  if (e.contains("mtime_ms") && e["mtime_ms"].is_number_integer())
    out["modifiedTime"] = FormatRfc3339(e["mtime_ms"].get<int64_t>());
  if (type == "symlink") out["symlinkTarget"] = e.value("target", "");
  return out;
}

Result<std::string> StringField(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
    return MakeError(Code::kInvalidArgument, std::string(key) + " is required");
  return j[key].get<std::string>();
}

// A file operation as an E2B call asks it: its user, and paths from that user's home.
json Op(const char* op, const std::string& user) {
  json j = {{"op", op}, {"home_relative", true}};
  if (!user.empty()) j["user"] = user;
  return j;
}

}  // namespace

// filesystem.Filesystem/Stat, ListDir, MakeDir, Move, Remove: unary calls, each the file
// operation of the same meaning (MakeDir and Move then stat what they made).
asio::awaitable<Response> Api::EnvdFilesystem(Request& req) {
  const std::string id = req.params["id"];
  const std::string call = req.pattern.substr(std::string("/filesystem.Filesystem/").size());
  auto body = UnaryBody(req);
  if (!body.ok()) co_return ConnectError(body.error());
  auto user = BasicUser(req.Header("authorization"));
  if (!user.ok()) co_return ConnectError(user.error());
  auto stat = [&](const std::string& path) -> asio::awaitable<Result<json>> {
    json op = Op("stat", *user);
    op["path"] = path;
    auto f = co_await StartFileOp(id, op);
    if (!f.ok()) co_return f.error();
    co_return EntryInfo(f->first);
  };
  // Every call names a path (Move its source).
  auto path = StringField(*body, call == "Move" ? "source" : "path");
  if (!path.ok()) co_return ConnectError(path.error());
  if (call == "Stat") {
    auto e = co_await stat(*path);
    if (!e.ok()) co_return ConnectError(e.error());
    co_return Json(200, {{"entry", *e}});
  }
  if (call == "ListDir") {
    json op = Op("list", *user);
    op["path"] = *path;
    op["depth"] = 1;
    if (body->contains("depth")) {
      const json& d = (*body)["depth"];
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > 64)
        co_return ConnectError(MakeError(Code::kInvalidArgument, "depth must be between 1 and 64"));
      op["depth"] = std::max<int64_t>(1, d.get<int64_t>());
    }
    auto f = co_await StartFileOp(id, op);
    if (!f.ok()) co_return ConnectError(f.error());
    json entries = json::array();
    for (const auto& e : f->first.value("entries", json::array())) entries.push_back(EntryInfo(e));
    co_return Json(200, {{"entries", entries}});
  }
  if (call == "MakeDir") {
    json op = Op("mkdir", *user);
    op["path"] = *path;
    op["parents"] = true;
    auto f = co_await StartFileOp(id, op);
    if (!f.ok()) co_return ConnectError(f.error());
    if (!f->first.value("created", false))
      co_return ConnectError(MakeError(Code::kAlreadyExists, "directory " + *path + " already exists"));
    auto e = co_await stat(*path);
    if (!e.ok()) co_return ConnectError(e.error());
    co_return Json(200, {{"entry", *e}});
  }
  if (call == "Move") {
    auto to = StringField(*body, "destination");
    if (!to.ok()) co_return ConnectError(to.error());
    json op = Op("move", *user);
    op["from"] = *path;
    op["to"] = *to;
    op["overwrite"] = true;  // envd renames over what is there, as rename(2) does
    auto f = co_await StartFileOp(id, op);
    if (!f.ok()) co_return ConnectError(f.error());
    auto e = co_await stat(*to);
    if (!e.ok()) co_return ConnectError(e.error());
    co_return Json(200, {{"entry", *e}});
  }
  // Remove: recursive, and a path that is not there is no error (envd's RemoveAll).
  json op = Op("remove", *user);
  op["path"] = *path;
  op["recursive"] = true;
  auto f = co_await StartFileOp(id, op);
  if (!f.ok() && f.error().code != Code::kNotFound) co_return ConnectError(f.error());
  co_return Json(200, json::object());
}

// filesystem.Filesystem/WatchDir: a server stream of the folder's events (the agent's
// inotify watch): a start event once the folder is watched, then create, write, remove
// and rename events named relative to the folder, with keep-alives while quiet. A rename
// is a rename event for the old name and a create event for the new one, as envd's.
asio::awaitable<Response> Api::EnvdWatchDir(Request& req) {
  const std::string id = req.params["id"];
  auto fail = [](const Error& e) { return StreamError(e); };
  if (Response bad; !SpeaksConnectJson(req, &bad)) co_return bad;
  auto msg = ReadEnvelope(req.body);
  if (!msg.ok()) co_return fail(msg.error());
  auto path = StringField(*msg, "path");
  if (!path.ok()) co_return fail(path.error());
  auto user = BasicUser(req.Header("authorization"));
  if (!user.ok()) co_return fail(user.error());
  json op = Op("watch", *user);
  op["path"] = *path;
  if (msg->contains("recursive") && !(*msg)["recursive"].is_boolean())
    co_return fail(MakeError(Code::kInvalidArgument, "recursive must be true or false"));
  op["recursive"] = msg->value("recursive", false);
  op["keepalive_ms"] = manager_->keepalive_ms();
  auto f = co_await StartFileOp(id, op);
  if (!f.ok()) co_return fail(f.error());
  std::shared_ptr<agent::Conn> conn = f->conn;
  if (req.client_gone)
    req.client_gone->OnFire([conn] {
      asio::post(conn->socket().get_executor(), [conn] {
        boost::system::error_code ignored;
        conn->socket().close(ignored);
      });
    });
  std::string root = f->first.value("path", *path);
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  std::shared_ptr<core::AgentLease> lease = f->lease;
  Response r;
  r.content_type = "application/connect+json";
  r.stream = [conn, lease, root](ChunkSink sink) -> asio::awaitable<std::optional<Response>> {
    std::string first = Envelope(0, {{"start", json::object()}});  // WatchDirResponse's oneof
    if (!co_await sink(first)) co_return std::nullopt;
    auto name_of = [&root](const std::string& p) {
      return p.rfind(root + "/", 0) == 0 ? p.substr(root.size() + 1) : p;
    };
    auto fs_event = [](const std::string& name, const char* type) {
      return Envelope(0, {{"filesystem", {{"name", name}, {"type", type}}}});
    };
    std::string carry;
    while (true) {
      auto fr = co_await conn->Recv();
      if (!fr.ok() || fr->type == agent::FrameType::kDataEnd) {
        std::string end = EndOfStream(fr.ok() ? std::nullopt : std::optional<Error>(fr.error()));
        co_await sink(end);
        co_return std::nullopt;
      }
      carry += fr->payload;
      std::string out;
      for (size_t nl; (nl = carry.find('\n')) != std::string::npos; carry.erase(0, nl + 1)) {
        json ev = json::parse(carry.substr(0, nl), nullptr, false);
        if (!ev.is_object()) continue;
        const std::string type = ev.value("type", "");
        const std::string p = ev.value("path", "");
        // An upload goes to a hidden file that is renamed over its name at the end
        // (agent/files.h): the watcher sees the name made and written, as envd's would.
        if (p.find("/" + std::string(agent::kUploadPrefix)) != std::string::npos) {
          if (type == "rename" && ev.contains("to") && ev["to"].is_string()) {
            out += fs_event(name_of(ev["to"]), "EVENT_TYPE_CREATE");
            out += fs_event(name_of(ev["to"]), "EVENT_TYPE_WRITE");
          }
          continue;
        }
        if (type == "create") out += fs_event(name_of(p), "EVENT_TYPE_CREATE");
        else if (type == "write") out += fs_event(name_of(p), "EVENT_TYPE_WRITE");
        else if (type == "remove") out += fs_event(name_of(p), "EVENT_TYPE_REMOVE");
        else if (type == "rename") {
          out += fs_event(name_of(p), "EVENT_TYPE_RENAME");
          if (ev.contains("to") && ev["to"].is_string()) out += fs_event(name_of(ev["to"]), "EVENT_TYPE_CREATE");
        } else if (type == "keepalive") {
          out += Envelope(0, {{"keepalive", json::object()}});
        } else if (type == "error" || type == "overflow") {
          out += EndOfStream(MakeError(Code::kInternal, ev.value("message", "the watch lost events (" + type + ")")));
          co_await sink(out);
          co_return std::nullopt;
        }
      }
      if (!out.empty() && !co_await sink(out)) co_return std::nullopt;
    }
  };
  co_return r;
}

// GET /files?path=P[&username=U]: the file's bytes.
asio::awaitable<Response> Api::EnvdGetFile(Request& req) {
  const std::string id = req.params["id"];
  auto p = req.query.find("path");
  if (p == req.query.end() || p->second.empty()) co_return E2bError(MakeError(Code::kInvalidArgument, "path is required"));
  auto u = req.query.find("username");
  json op = Op("read", u == req.query.end() ? "" : u->second);
  op["path"] = p->second;
  auto f = co_await StartFileOp(id, op);
  if (!f.ok()) co_return E2bError(f.error());
  co_return StreamData(f->conn, f->lease, "application/octet-stream");
}

// POST /files?path=P[&username=U]: a body of application/octet-stream is the file at P;
// a multipart/form-data body holds one or more "file" parts, each written to P or, without
// it, to its file name. Answers [{"name","type":"file","path"}] per file written.
asio::awaitable<Response> Api::EnvdPostFile(Request& req) {
  const std::string id = req.params["id"];
  const std::string ctype = req.Header("content-type");
  auto u = req.query.find("username");
  const std::string user = u == req.query.end() ? "" : u->second;
  const std::string path = req.query.count("path") ? req.query.at("path") : "";
  if (!req.Header("content-encoding").empty() && req.Header("content-encoding") != "identity")
    co_return E2bError(MakeError(Code::kInvalidArgument, "compressed uploads (Content-Encoding: " +
                                                             req.Header("content-encoding") + ") are not supported"));
  std::string media = ctype.substr(0, ctype.find(';'));
  for (auto& ch : media) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  const bool multipart = media == "multipart/form-data";
  if (!multipart && path.empty()) co_return E2bError(MakeError(Code::kInvalidArgument, "path is required"));
  // The body goes into the sandbox as it arrives (the server reads it only as this pulls
  // it), so the sandbox's own disk holds it, never the host's: one that declares more
  // than that disk is refused before a byte of it is read, and the agent refuses the rest
  // at the disk's size or when the disk is full.
  BodySource* body = req.body_source;
  const std::optional<uint64_t> declared = body->declared();
  auto lease = co_await manager_->AcquireAgent(id);
  if (!lease.ok()) co_return E2bError(lease.error());
  const uint64_t disk = (*lease)->disk_bytes();
  lease->reset();
  if (declared && disk && *declared > disk)
    co_return E2bError(MakeError(Code::kTooLarge, "the upload (" + std::to_string(*declared) +
                                                      " bytes) is larger than the sandbox's disk (" +
                                                      std::to_string(disk) + " bytes)"));
  json written = json::array();
  std::optional<FileOp> open;  // the file being written
  auto start = [&](const std::string& to, std::optional<uint64_t> size) -> asio::awaitable<Status> {
    json op = Op("write", user);
    op["path"] = to;
    op["parents"] = true;
    op["mode"] = 0644;
    if (size) op["size"] = *size;  // the agent refuses it at once if its disk has no room
    auto f = co_await StartFileOp(id, op);
    if (!f.ok()) co_return f.error();
    open = std::move(*f);
    co_return OkStatus();
  };
  auto finish = [&](const std::string& to, Status sent) -> asio::awaitable<Status> {
    auto done = co_await EndUpload(open->conn.get(), sent);
    open.reset();
    if (!done.ok()) co_return done.error();
    std::string full = done->value("path", to);
    written.push_back({{"name", full.substr(full.rfind('/') + 1)}, {"type", "file"}, {"path", full}});
    co_return OkStatus();
  };
  if (!multipart) {
    if (Status st = co_await start(path, declared); !st.ok()) co_return E2bError(st.error());
    Status sent = OkStatus();
    while (sent.ok()) {
      auto piece = co_await body->Next();
      if (!piece.ok()) {
        open.reset();  // the upload itself failed: the agent drops its hidden file
        co_return E2bError(piece.error());
      }
      if (piece->empty()) break;
      sent = co_await SendUploadPiece(open->conn.get(), std::move(*piece));
    }
    // A piece the agent did not take: its refusal (the disk is full) is its answer.
    if (Status st = co_await finish(path, sent); !st.ok()) co_return E2bError(st.error());
    co_return Json(200, written);
  }
  MultipartReader reader(HeaderParam(ctype, "boundary"));
  std::vector<MultipartEvent> events;
  std::string to;   // the file part being written ("" for a part that is not one)
  size_t parts = 0;
  Status sent = OkStatus();
  while (true) {
    auto piece = co_await body->Next();
    if (!piece.ok()) co_return E2bError(piece.error());
    events.clear();
    if (piece->empty()) {
      if (Status st = reader.Finish(); !st.ok()) co_return E2bError(st.error());
      break;
    }
    if (Status st = reader.Feed(*piece, &events); !st.ok()) co_return E2bError(st.error());
    for (auto& e : events) {
      if (e.kind == MultipartEvent::kPart) {
        if (++parts > kMaxParts)
          co_return E2bError(MakeError(Code::kInvalidArgument, "at most " + std::to_string(kMaxParts) + " files in one upload"));
        if (e.name != "file") continue;
        to = path.empty() ? e.filename : path;
        if (to.empty()) co_return E2bError(MakeError(Code::kInvalidArgument, "a file part has no file name and no path was given"));
        if (Status st = co_await start(to, std::nullopt); !st.ok()) co_return E2bError(st.error());
        sent = OkStatus();
      } else if (!open) {
        continue;  // the content of a part that is no file
      } else if (e.kind == MultipartEvent::kData) {
        if (sent.ok()) sent = co_await SendUploadPiece(open->conn.get(), std::move(e.data));
        // A refusal (the disk is full) is the agent's answer, read at the part's end.
        if (!sent.ok()) {
          if (Status st = co_await finish(to, sent); !st.ok()) co_return E2bError(st.error());
        }
      } else {
        if (Status st = co_await finish(to, sent); !st.ok()) co_return E2bError(st.error());
      }
    }
  }
  if (written.empty()) co_return E2bError(MakeError(Code::kInvalidArgument, "the multipart body has no \"file\" part"));
  co_return Json(200, written);
}

}  // namespace sbx::api
