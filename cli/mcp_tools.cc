// The MCP server's tools: each is one or a few calls to sbxd's own API (no second
// implementation of anything), and each answers with the structured result as
// structuredContent and as JSON text (for clients that read only text).
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "base/base64.h"
#include "commands.h"
#include "http_client.h"
#include "mcp.h"

namespace sbx::cli::mcp {
namespace {

using nlohmann::json;

// A failure a tool reports as an isError result.
struct ToolError {
  std::string message;
};

// One tool call's connection to sbxd, with the call's start for its duration.
class Api {
 public:
  explicit Api(const Globals& g) : c_(g.url, g.api_key), start_(std::chrono::steady_clock::now()) {}

  // A call that must succeed (status < 300): its JSON body, else throws ToolError with
  // sbxd's message and code. `ok_statuses` lists failures that are answers too (504).
  json Call(const std::string& method, const std::string& target, const json& body = nullptr, int* status = nullptr) {
    auto r = c_.Call(method, target, body.is_null() ? "" : body.dump());
    if (!r.ok()) throw ToolError{"sbxd cannot be reached at the CLI's URL: " + r.error().message};
    if (status) *status = r->status;
    auto j = json::parse(r->body, nullptr, false);
    if (r->status >= 300 && !status) throw ToolError{Message(r->status, j, r->body)};
    if (j.is_discarded()) throw ToolError{"sbxd sent a body that is not JSON (HTTP " + std::to_string(r->status) + ")"};
    return j;
  }
  // A call with raw bytes out and in (a file's): the answer's body.
  std::string Raw(const std::string& method, const std::string& target, const std::string& body = "") {
    auto r = c_.Call(method, target, body, "application/octet-stream");
    if (!r.ok()) throw ToolError{"sbxd cannot be reached at the CLI's URL: " + r.error().message};
    if (r->status >= 300) throw ToolError{Message(r->status, json::parse(r->body, nullptr, false), r->body)};
    return std::move(r->body);
  }
  double ElapsedMs() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  // "MESSAGE (code)" of an error answer.
  static std::string Message(int status, const json& j, const std::string& raw) {
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      std::string code = j["error"].value("code", "");
      return j["error"].value("message", "") + (code.empty() ? "" : " (" + code + ")");
    }
    return "HTTP " + std::to_string(status) + ": " + raw.substr(0, 500);
  }

 private:
  HttpClient c_;
  std::chrono::steady_clock::time_point start_;
};

// Argument readers: a missing optional argument is the default; a wrong type is a ToolError.
std::string Str(const json& args, const char* k, const std::string& def = "") {
  if (!args.contains(k) || args[k].is_null()) return def;
  if (!args[k].is_string()) throw ToolError{std::string("argument ") + k + " must be a string"};
  return args[k].get<std::string>();
}
std::string Required(const json& args, const char* k) {
  std::string v = Str(args, k);
  if (v.empty()) throw ToolError{std::string("argument ") + k + " is required"};
  return v;
}
std::optional<int64_t> Int(const json& args, const char* k) {
  if (!args.contains(k) || args[k].is_null()) return std::nullopt;
  if (!args[k].is_number_integer()) throw ToolError{std::string("argument ") + k + " must be an integer"};
  return args[k].get<int64_t>();
}
bool Bool(const json& args, const char* k, bool def) {
  if (!args.contains(k) || args[k].is_null()) return def;
  if (!args[k].is_boolean()) throw ToolError{std::string("argument ") + k + " must be true or false"};
  return args[k].get<bool>();
}
// `command`: a string (a shell command line) or an array of strings (the argv).
json Command(const json& args) {
  if (!args.contains("command")) throw ToolError{"argument command is required"};
  const json& c = args["command"];
  bool ok = (c.is_string() && !c.get<std::string>().empty()) || (c.is_array() && !c.empty());
  if (c.is_array())
    for (const auto& a : c) ok = ok && a.is_string();
  if (!ok) throw ToolError{"argument command must be a non-empty string (a shell command line) or an array of strings"};
  return c;
}
json Env(const json& args) {
  if (!args.contains("env") || args["env"].is_null()) return json::object();
  if (!args["env"].is_object()) throw ToolError{"argument env must be an object of strings"};
  for (const auto& [k, v] : args["env"].items())
    if (!v.is_string()) throw ToolError{"argument env must be an object of strings (" + k + " is not)"};
  return args["env"];
}
std::string Path(const std::string& what, const std::string& ref) { return "/v1/" + what + "/" + PercentEncode(ref); }

// The exec body shared by run_command and run_on_disk.
json ExecBody(const json& args) {
  json body = {{"cmd", Command(args)}, {"env", Env(args)}};
  if (auto t = Int(args, "timeout_seconds")) body["timeout_seconds"] = *t;
  if (std::string cwd = Str(args, "cwd"); !cwd.empty()) body["cwd"] = cwd;
  return body;
}

// An exec's answer as the tool's result.
json ExecResult(const json& a, const std::string& sandbox, double ms) {
  json r = {{"exit_code", a.value("exit_code", -1)},
            {"stdout", a.value("stdout", "")},
            {"stderr", a.value("stderr", "")},
            {"timed_out", a.value("timed_out", false)},
            {"duration_ms", ms}};
  if (a.contains("signal")) r["signal"] = a["signal"];
  if (a.value("stdout_truncated", false) || a.value("stderr_truncated", false)) r["truncated"] = true;
  if (a.contains("timing")) r["timing"] = a["timing"];
  if (!sandbox.empty()) r["sandbox"] = sandbox;
  return r;
}

// Runs an exec in `id`; a timed-out command (200 with timed_out, or 504 with output) is a result.
json Exec(Api& api, const std::string& id, const json& body) {
  int status = 0;
  json a = api.Call("POST", Path("sandboxes", id) + "/exec", body, &status);
  if (status >= 300 && !(status == 504 && a.contains("exit_code"))) throw ToolError{Api::Message(status, a, a.dump())};
  return a;
}

SandboxPolicy& Policy() {
  static SandboxPolicy policy;
  return policy;
}

// The network mode of a sandbox a tool makes, as the server's policy allows what the call
// asked ("" for the daemon's default).
std::string NetworkFor(const json& args) {
  std::string net = Str(args, "network");
  if (Policy().network == "none") return "none";
  return net.empty() ? Policy().network : net;
}

// A create body from the image/from/type arguments.
json CreateBody(const json& args) {
  json body = json::object();
  if (std::string image = Str(args, "image"); !image.empty()) body["image"] = image;
  if (std::string from = Str(args, "from"); !from.empty()) body["from"] = from;
  if (std::string type = Str(args, "type"); !type.empty()) body["type"] = type;
  if (std::string net = NetworkFor(args); !net.empty()) body["network"] = {{"mode", net}};
  body["no_env"] = !Policy().env;
  body["metadata"] = {{"created_by", "sbx-mcp"}};
  return body;
}

json SandboxSummary(const json& s) {
  json r = json::object();
  for (const char* k : {"id", "name", "state", "image", "user", "type", "expires_at"})
    if (s.contains(k)) r[k] = s[k];
  return r;
}

// ---- the tools ----

json CreateSandbox(Api& api, const json& args) {
  json body = CreateBody(args);
  if (std::string name = Str(args, "name"); !name.empty()) body["name"] = name;
  if (auto ttl = Int(args, "ttl_seconds")) body["ttl_seconds"] = *ttl;
  if (std::string user = Str(args, "user"); !user.empty()) body["user"] = user;
  return SandboxSummary(api.Call("POST", "/v1/sandboxes", body));
}

// The session's sandbox (named `session`): found by name, started if stopped, or created.
std::string SessionSandbox(Api& api, const std::string& session, const json& args) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    int status = 0;
    // By name only: sbxd also takes a unique id prefix, and a session called "ab" must not
    // land in a sandbox whose id starts so.
    json s = api.Call("GET", "/v1/sandboxes?name=" + PercentEncode(session), nullptr, &status);
    if (status == 200) {
      json list = s.is_object() ? s.value("sandboxes", json::array()) : json::array();
      s = list.empty() ? json() : list[0];
      status = list.empty() ? 404 : 200;
    }
    if (status == 200) {
      if (s.value("state", "") == "stopped") api.Call("POST", Path("sandboxes", session) + "/start");
      return s.value("id", session);
    }
    if (status != 404) throw ToolError{Api::Message(status, s, s.dump())};
    json body = CreateBody(args);
    body["name"] = session;
    body["metadata"]["mcp_session"] = session;
    if (auto ttl = Int(args, "ttl_seconds")) body["ttl_seconds"] = *ttl;
    json made = api.Call("POST", "/v1/sandboxes", body, &status);
    if (status == 201) return made.value("id", session);
    if (status != 409) throw ToolError{Api::Message(status, made, made.dump())};
    // 409: another call made the session's sandbox first; take that one.
  }
  throw ToolError{"the session's sandbox " + session + " could not be found or made"};
}

json RunCommand(Api& api, const json& args) {
  std::string sandbox = Str(args, "sandbox"), session = Str(args, "session");
  if (!sandbox.empty() && !session.empty()) throw ToolError{"give either sandbox or session, not both"};
  json body = ExecBody(args);
  if (args.contains("stdin") && !args["stdin"].is_null()) body["stdin"] = Str(args, "stdin");
  if (std::string user = Str(args, "user"); !user.empty()) body["user"] = user;
  if (!sandbox.empty()) return ExecResult(Exec(api, sandbox, body), sandbox, api.ElapsedMs());
  if (!session.empty()) {
    std::string id = SessionSandbox(api, session, args);
    return ExecResult(Exec(api, id, body), id, api.ElapsedMs());
  }
  // A fresh sandbox for this call alone, deleted whatever happens.
  json create = CreateBody(args);
  create["ttl_seconds"] = body.value("timeout_seconds", int64_t{60}) + 120;
  std::string id = api.Call("POST", "/v1/sandboxes", create).value("id", "");
  json answer;
  try {
    answer = Exec(api, id, body);
  } catch (...) {
    int ignored = 0;
    api.Call("DELETE", Path("sandboxes", id), nullptr, &ignored);
    throw;
  }
  int ignored = 0;
  api.Call("DELETE", Path("sandboxes", id), nullptr, &ignored);
  json r = ExecResult(answer, "", api.ElapsedMs());
  r["fresh_sandbox"] = id;
  return r;
}

// A cell in the sandbox's code interpreter: what it printed, its results and its error.
json RunCode(Api& api, const json& args) {
  std::string sandbox = Str(args, "sandbox"), session = Str(args, "session");
  if (!sandbox.empty() && !session.empty()) throw ToolError{"give either sandbox or session, not both"};
  if (sandbox.empty() && session.empty()) throw ToolError{"give sandbox or session: a code context lives in one"};
  json body = {{"code", Required(args, "code")}};
  for (const char* k : {"language", "context"})
    if (std::string v = Str(args, k); !v.empty()) body[k] = v;
  if (auto t = Int(args, "timeout_seconds")) body["timeout_seconds"] = *t;
  std::string id = !sandbox.empty() ? sandbox : SessionSandbox(api, session, args);
  int status = 0;
  json r = api.Call("POST", Path("sandboxes", id) + "/code", body, &status);
  if (status >= 300) throw ToolError{Api::Message(status, r, r.dump())};
  r["sandbox"] = id;
  r["duration_ms"] = api.ElapsedMs();
  return r;
}

json RunOnDisk(Api& api, const json& args) {
  std::string disk = Required(args, "disk");
  json body = ExecBody(args);
  if (std::string image = Str(args, "image"); !image.empty()) body["image"] = image;
  if (std::string from = Str(args, "from"); !from.empty()) body["from"] = from;
  if (std::string net = NetworkFor(args); !net.empty()) body["network"] = {{"mode", net}};
  int status = 0;
  // A disk is found by id or name only (not by an id prefix, as sbxd would): a name that
  // is neither is made, unless `create` is false.
  json disks = api.Call("GET", "/v1/disks");
  bool exists = false;
  for (const auto& d : disks.is_object() ? disks.value("disks", json::array()) : disks)
    exists = exists || (d.is_object() && (d.value("id", "") == disk || (d.contains("name") && d["name"] == disk)));
  if (!exists) {
    if (!Bool(args, "create", true)) throw ToolError{"disk " + disk + " not found (not_found)"};
    json made = {{"name", disk}};
    if (auto mb = Int(args, "size_mb")) made["size_mb"] = *mb;
    json answer = api.Call("POST", "/v1/disks", made, &status);
    // 409: another call made it first.
    if (status >= 300 && status != 409) throw ToolError{Api::Message(status, answer, answer.dump())};
  }
  json a = api.Call("POST", Path("disks", disk) + "/exec", body, &status);
  if (status >= 300 && !(status == 504 && a.contains("exit_code"))) throw ToolError{Api::Message(status, a, a.dump())};
  json r = ExecResult(a, "", api.ElapsedMs());
  r["disk"] = disk;
  return r;
}

json FilesTarget(const json& args, const std::string& route) {
  return Path("sandboxes", Required(args, "sandbox")) + route + "?path=" + PercentEncode(Required(args, "path"));
}

json ReadFile(Api& api, const json& args) {
  std::string target = FilesTarget(args, "/files");
  std::string data = api.Raw("GET", target);
  json r = {{"path", Str(args, "path")}, {"size", data.size()}};
  try {
    (void)json(data).dump();  // throws on what is not UTF-8
    r["content"] = data;
    r["encoding"] = "text";
  } catch (const json::exception&) {
    r["content"] = Base64Encode(data);
    r["encoding"] = "base64";
  }
  return r;
}

json WriteFile(Api& api, const json& args) {
  std::string target = FilesTarget(args, "/files");
  if (!args.contains("content") || !args["content"].is_string()) throw ToolError{"argument content (a string) is required"};
  std::string content = args["content"].get<std::string>();
  std::string encoding = Str(args, "encoding", "text");
  if (encoding == "base64") {
    auto bytes = Base64Decode(content);
    if (!bytes.ok()) throw ToolError{"content is not base64: " + bytes.error().message};
    content = *bytes;
  } else if (encoding != "text") {
    throw ToolError{"encoding must be \"text\" or \"base64\""};
  }
  if (auto mode = Int(args, "mode")) target += "&mode=" + std::to_string(*mode);
  api.Raw("PUT", target, content);
  return {{"path", Str(args, "path")}, {"size", content.size()}};
}

json ListFiles(Api& api, const json& args) {
  std::string target = FilesTarget(args, "/files/list");
  if (auto depth = Int(args, "depth")) target += "&depth=" + std::to_string(*depth);
  return api.Call("GET", target);
}

json Snapshot(Api& api, const json& args) {
  return api.Call("POST", Path("sandboxes", Required(args, "sandbox")) + "/snapshot", {{"name", Required(args, "name")}});
}

json DeleteSandbox(Api& api, const json& args) {
  return api.Call("DELETE", Path("sandboxes", Required(args, "sandbox")));
}

json ListSandboxes(Api& api, const json&) {
  json list = api.Call("GET", "/v1/sandboxes");
  json out = json::array();
  for (const auto& s : list.is_object() ? list.value("sandboxes", json::array()) : list) out.push_back(SandboxSummary(s));
  return {{"sandboxes", out}};
}

// ---- the catalogue ----

json Prop(const char* type, const char* description) { return {{"type", type}, {"description", description}}; }

const json kCommandProp = {
    {"description",
     "A shell command line (a string, run with /bin/sh -c) or an argv (an array of strings, run without a shell)"},
    {"anyOf", json::array({json{{"type", "string"}}, json{{"type", "array"}, {"items", {{"type", "string"}}}}})}};

struct Tool {
  const char* name;
  const char* title;
  const char* description;
  json properties;
  json required;
  std::function<json(Api&, const json&)> run;
};

const std::vector<Tool>& Tools() {
  static const std::vector<Tool> tools = {
      {"create_sandbox", "Create a sandbox",
       "Starts an isolated Linux sandbox that keeps its files and processes between calls until it is deleted or its "
       "TTL passes. Returns its id.",
       {{"image", Prop("string", "Image to start from (default: sbxd's default image)")},
        {"from", Prop("string", "A named snapshot to start from instead of an image")},
        {"name", Prop("string", "A unique name, usable wherever an id is")},
        {"type", Prop("string", "small, default or large")},
        {"ttl_seconds", Prop("integer", "Seconds until it stops (default 3600)")},
        {"network", Prop("string", "none or outbound (default: the server's --network, else sbxd's default)")},
        {"user", Prop("string", "Who its commands run as by default: root, or a user of the image (default: user "
                                "where the image has it, else root)")}},
       json::array(),
       CreateSandbox},
      {"run_command", "Run a command",
       "Runs a command and returns its stdout, stderr, exit code and timing. With `sandbox`, in that sandbox; with "
       "`session`, in the session's sandbox (made on first use, kept for later calls); with neither, in a fresh "
       "sandbox made for this call and deleted after it.",
       {{"command", kCommandProp},
        {"sandbox", Prop("string", "Id or name of an existing sandbox")},
        {"session", Prop("string", "A session name: its sandbox is reused by every call that names it")},
        {"image", Prop("string", "Image of a fresh or new session sandbox")},
        {"from", Prop("string", "Snapshot of a fresh or new session sandbox")},
        {"cwd", Prop("string", "Working directory")},
        {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}, {"description", "Variables"}}},
        {"stdin", Prop("string", "Text given to the command's stdin")},
        {"user", Prop("string", "Run as this user of the sandbox (a name or a uid; default: the sandbox's default user)")},
        {"timeout_seconds", Prop("integer", "Kill the command after this long (default 60)")}},
       json::array({"command"}),
       RunCommand},
      {"run_code", "Run code",
       "Runs Python (or bash) code in a long-lived interpreter of a sandbox: variables, imports and the working "
       "directory last from one call to the next. Returns stdout, stderr, the results (the last expression's value, "
       "with HTML or PNG forms where the object has them) and the error with its traceback. With `session`, in the "
       "session's sandbox (made on first use).",
       {{"code", Prop("string", "The code")},
        {"sandbox", Prop("string", "Id or name of an existing sandbox")},
        {"session", Prop("string", "A session name: its sandbox is reused by every call that names it")},
        {"language", Prop("string", "python (default) or bash")},
        {"context", Prop("string", "A code context id (default: the language's own context)")},
        {"image", Prop("string", "Image of a new session sandbox")},
        {"from", Prop("string", "Snapshot of a new session sandbox")},
        {"timeout_seconds", Prop("integer", "Interrupt the code after this long (default 300)")}},
       json::array({"code"}),
       RunCode},
      {"run_on_disk", "Run a command on a persistent disk",
       "A serverless call: a fresh sandbox with the disk mounted at /mnt/disk (the working directory) runs one "
       "command and is gone; what the command writes under /mnt/disk stays on the disk for the next call. The disk "
       "is created on first use unless create is false.",
       {{"disk", Prop("string", "Disk id or name")},
        {"command", kCommandProp},
        {"image", Prop("string", "Image of the call's sandbox")},
        {"from", Prop("string", "Snapshot of the call's sandbox")},
        {"cwd", Prop("string", "Working directory (default /mnt/disk)")},
        {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}, {"description", "Variables"}}},
        {"timeout_seconds", Prop("integer", "1 to 300 (default 300)")},
        {"create", Prop("boolean", "Create a missing disk with this name (default true)")},
        {"size_mb", Prop("integer", "Size of a disk made now (default 1024)")}},
       json::array({"disk", "command"}),
       RunOnDisk},
      {"read_file", "Read a file",
       "Reads a file in a sandbox: its text, or base64 (encoding says which) when it is not UTF-8.",
       {{"sandbox", Prop("string", "Sandbox id or name")}, {"path", Prop("string", "Absolute path in the sandbox")}},
       json::array({"sandbox", "path"}),
       ReadFile},
      {"write_file", "Write a file",
       "Writes a whole file in a sandbox (missing folders are made).",
       {{"sandbox", Prop("string", "Sandbox id or name")},
        {"path", Prop("string", "Absolute path in the sandbox")},
        {"content", Prop("string", "The file's content")},
        {"encoding", Prop("string", "text (default) or base64")},
        {"mode", Prop("integer", "Permission bits, as a number (default 420, that is 0644)")}},
       json::array({"sandbox", "path", "content"}),
       WriteFile},
      {"list_files", "List a folder",
       "Lists a folder in a sandbox: name, type, size, mode and mtime of each entry.",
       {{"sandbox", Prop("string", "Sandbox id or name")},
        {"path", Prop("string", "Absolute path in the sandbox")},
        {"depth", Prop("integer", "Levels down (1 to 64, default 1)")}},
       json::array({"sandbox", "path"}),
       ListFiles},
      {"snapshot", "Snapshot a sandbox",
       "Saves a sandbox's files as a named snapshot; create_sandbox or run_command with `from` start from it.",
       {{"sandbox", Prop("string", "Sandbox id or name")}, {"name", Prop("string", "The snapshot's name")}},
       json::array({"sandbox", "name"}),
       Snapshot},
      {"delete_sandbox", "Delete a sandbox", "Deletes a sandbox with its files and processes.",
       {{"sandbox", Prop("string", "Sandbox id or name")}},
       json::array({"sandbox"}),
       DeleteSandbox},
      {"list_sandboxes", "List sandboxes", "Lists the sandboxes: id, name, state, image, type, expiry.",
       json::object(),
       json::array(),
       ListSandboxes},
  };
  return tools;
}

}  // namespace

void SetSandboxPolicy(SandboxPolicy policy) { Policy() = std::move(policy); }

json ToolList() {
  json out = json::array();
  for (const Tool& t : Tools())
    out.push_back({{"name", t.name},
                   {"title", t.title},
                   {"description", t.description},
                   {"inputSchema", {{"type", "object"}, {"properties", t.properties}, {"required", t.required}}}});
  return out;
}

std::optional<json> CallTool(const Globals& g, const std::string& name, const json& args) {
  for (const Tool& t : Tools()) {
    if (name != t.name) continue;
    try {
      if (!args.is_object()) throw ToolError{"arguments must be an object"};
      Api api(g);
      json result = t.run(api, args);
      if (!result.is_object()) result = {{"result", result}};
      return json{{"content", json::array({json{{"type", "text"}, {"text", result.dump(2)}}})},
                  {"structuredContent", result},
                  {"isError", false}};
    } catch (const ToolError& e) {
      return json{{"content", json::array({json{{"type", "text"}, {"text", e.message}}})}, {"isError", true}};
    } catch (const std::exception& e) {
      return json{{"content", json::array({json{{"type", "text"}, {"text", std::string("sbx mcp: ") + e.what()}}})},
                  {"isError", true}};
    }
  }
  return std::nullopt;
}

}  // namespace sbx::cli::mcp
