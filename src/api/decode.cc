#include "api/decode.h"

#include "base/ids.h"

namespace sbx::api {

using nlohmann::json;

namespace {
Error Invalid(const std::string& msg) { return MakeError(Code::kInvalidArgument, msg); }

// Counts a document's values and depth without building it; stops at either bound.
class JsonBudget final : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return Value(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    malformed_ = true;
    return false;
  }
  bool over() const { return over_; }

 private:
  bool Value() {
    if (++values_ <= kMaxJsonValues) return true;
    over_ = true;
    return false;
  }
  bool Open() {
    if (++depth_ > kMaxJsonDepth) {
      over_ = true;
      return false;
    }
    return Value();
  }
  bool Close() {
    --depth_;
    return true;
  }
  size_t values_ = 0, depth_ = 0;
  bool over_ = false, malformed_ = false;
};

}  // namespace

Result<json> ParseJson(std::string_view text) {
  JsonBudget budget;
  if (!json::sax_parse(text, &budget)) {
    if (budget.over())
      return Invalid("the body's JSON is too large to take: at most " + std::to_string(kMaxJsonValues) +
                     " values, nested at most " + std::to_string(kMaxJsonDepth) + " deep");
    return Invalid("the body is not valid JSON");
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Invalid("the body is not valid JSON");
  return j;
}

// Strict body parsing: an object with only known fields.
Result<json> ParseObject(const std::string& body, const std::set<std::string>& allowed) {
  if (body.empty()) return json::object();
  SBX_ASSIGN_OR_RETURN(json j, ParseJson(body));
  if (!j.is_object()) return MakeError(Code::kInvalidArgument, "the body must be a JSON object");
  for (auto& [k, _] : j.items())
    if (!allowed.count(k)) return MakeError(Code::kInvalidArgument, "unknown field \"" + k + "\"");
  return j;
}

Result<std::string> GetString(const json& j, const char* key, const std::string& def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_string()) return MakeError(Code::kInvalidArgument, std::string(key) + " must be a string");
  return j[key].get<std::string>();
}

Result<std::string> GetName(const json& j, const char* key) {
  SBX_ASSIGN_OR_RETURN(std::string v, GetString(j, key));
  if (j.contains(key) && !j[key].is_null() && !ValidName(v))
    return MakeError(Code::kInvalidArgument,
                     std::string(key) + " \"" + v + "\" is not a valid name: names match [a-z0-9][a-z0-9._-]{0,62}");
  return v;
}

Result<std::optional<int64_t>> GetInt(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::optional<int64_t>();
  const json& v = j[key];
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return MakeError(Code::kInvalidArgument, std::string(key) + " is out of range");
    return std::optional<int64_t>(static_cast<int64_t>(v.get<uint64_t>()));
  }
  if (v.is_number_integer()) return std::optional<int64_t>(v.get<int64_t>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    // The range first: casting a double outside int64's range is undefined.
    if (d > -9e15 && d < 9e15 && d == static_cast<double>(static_cast<int64_t>(d)))
      return std::optional<int64_t>(static_cast<int64_t>(d));
  }
  return MakeError(Code::kInvalidArgument, std::string(key) + " must be an integer");
}

Result<bool> GetBool(const json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) return MakeError(Code::kInvalidArgument, std::string(key) + " must be a boolean");
  return j[key].get<bool>();
}

Result<std::map<std::string, std::string>> GetStringMap(const json& j, const char* key) {
  std::map<std::string, std::string> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_object())
    return MakeError(Code::kInvalidArgument, std::string(key) + " must be an object of strings");
  for (auto& [k, v] : j[key].items()) {
    if (!v.is_string())
      return MakeError(Code::kInvalidArgument, std::string(key) + "." + k + " must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

// The "cmd" of an exec: a non-empty string (for a shell; returned in *shell) or a
// non-empty array of strings (the argv; appended to *argv).
Status DecodeCommand(const json& body, core::ExecRequest* e) {
  std::string shell_cmd;
  SBX_RETURN_IF_ERROR(ParseCmd(body, &shell_cmd, &e->argv));
  if (!shell_cmd.empty()) e->argv = {"/bin/sh", "-c", shell_cmd};
  SBX_ASSIGN_OR_RETURN(e->cwd, GetString(body, "cwd"));
  SBX_ASSIGN_OR_RETURN(e->env, GetStringMap(body, "env"));
  SBX_ASSIGN_OR_RETURN(e->user, GetString(body, "user"));
  return OkStatus();
}

Status ParseCmd(const json& body, std::string* shell, std::vector<std::string>* argv) {
  if (!body.contains("cmd")) return MakeError(Code::kInvalidArgument, "cmd is required");
  const json& cmd = body["cmd"];
  if (cmd.is_string() && !cmd.get<std::string>().empty()) {
    *shell = cmd.get<std::string>();
    return OkStatus();
  }
  if (cmd.is_array() && !cmd.empty()) {
    for (const auto& a : cmd) {
      if (!a.is_string()) return MakeError(Code::kInvalidArgument, "cmd must be a string or an array of strings");
      argv->push_back(a.get<std::string>());
    }
    return OkStatus();
  }
  return MakeError(Code::kInvalidArgument, "cmd must be a string or a non-empty array of strings");
}

Result<core::CreateRequest> DecodeCreate(const std::string& body) {
  auto parsed = ParseObject(body, {"type", "isolation", "name", "image", "from", "ttl_seconds", "ttl_action",
                                   "idle_timeout_seconds", "auto_resume", "no_env", "env", "metadata", "network",
                                   "disks", "resources", "public", "no_new_privs", "user"});
  if (!parsed.ok()) return parsed.error();
  const json& j = *parsed;
  core::CreateRequest c;
  auto type = GetString(j, "type", "small");
  auto iso = GetString(j, "isolation");
  auto name = GetName(j, "name");
  auto image = GetString(j, "image");
  auto from = GetName(j, "from");
  auto ttl = GetInt(j, "ttl_seconds");
  auto ttl_action = GetString(j, "ttl_action", "stop");
  auto idle = GetInt(j, "idle_timeout_seconds");
  auto no_env = GetBool(j, "no_env", false);
  auto auto_resume = GetBool(j, "auto_resume", true);
  if (!auto_resume.ok()) return auto_resume.error();
  auto public_ports = GetBool(j, "public", false);
  if (!public_ports.ok()) return public_ports.error();
  auto no_new_privs = GetBool(j, "no_new_privs", true);
  if (!no_new_privs.ok()) return no_new_privs.error();
  auto user = GetString(j, "user");
  if (!user.ok()) return user.error();
  auto env = GetStringMap(j, "env");
  auto md = GetStringMap(j, "metadata");
  for (const Error* e : {type.ok() ? nullptr : &type.error(), iso.ok() ? nullptr : &iso.error(),
                         name.ok() ? nullptr : &name.error(), image.ok() ? nullptr : &image.error(),
                         from.ok() ? nullptr : &from.error(), ttl.ok() ? nullptr : &ttl.error(),
                         ttl_action.ok() ? nullptr : &ttl_action.error(),
                         idle.ok() ? nullptr : &idle.error(), no_env.ok() ? nullptr : &no_env.error(),
                         env.ok() ? nullptr : &env.error(), md.ok() ? nullptr : &md.error()})
    if (e) return *e;
  c.type = *type;
  c.isolation = *iso;
  c.name = *name;
  c.image = *image;
  c.from = *from;
  c.ttl_seconds = *ttl;
  c.ttl_action = *ttl_action;
  c.idle_timeout_seconds = idle->value_or(0);
  c.no_env = *no_env;
  c.auto_resume = *auto_resume;
  c.public_ports = *public_ports;
  c.no_new_privs = *no_new_privs;
  c.user = *user;
  c.env = *env;
  c.metadata = *md;
  // Core checks the rules (net::Rules): the API passes them as given.
  if (j.contains("network")) c.network = j["network"];
  if (j.contains("disks") && !j["disks"].is_null()) {
    const json& ds = j["disks"];
    if (!ds.is_array()) return Invalid("disks must be an array of {id, mount_path}");
    for (const auto& d : ds) {
      if (!d.is_object()) return Invalid("disks must be an array of {id, mount_path}");
      for (auto& [k, _] : d.items())
        if (k != "id" && k != "mount_path") return Invalid("unknown field disks[]." + k);
      auto id = GetString(d, "id");
      auto path = GetString(d, "mount_path", "/mnt/disk");
      if (!id.ok()) return id.error();
      if (!path.ok()) return path.error();
      if (!ValidName(*id)) return Invalid("disks[].id is not a valid disk id");
      c.disks.emplace_back(*id, *path);
    }
  }
  if (j.contains("resources") && !j["resources"].is_null()) {
    const json& r = j["resources"];
    if (!r.is_object()) return Invalid("resources must be an object");
    for (auto& [k, _] : r.items())
      if (k != "cpus" && k != "memory_mb" && k != "disk_mb" && k != "pids") return Invalid("unknown field resources." + k);
    auto cpus = GetInt(r, "cpus");
    auto mem = GetInt(r, "memory_mb");
    auto pids = GetInt(r, "pids");
    auto disk = GetInt(r, "disk_mb");
    for (auto* e : {&cpus, &mem, &pids, &disk})
      if (!e->ok()) return e->error();
    if (*cpus) {
      if (**cpus < 1 || **cpus > 256) return Invalid("resources.cpus must be between 1 and 256");
      c.cpus = static_cast<int>(**cpus);
    }
    if (*mem) c.memory_mb = **mem;
    if (*disk) c.disk_mb = **disk;
    if (*pids) {
      if (**pids < 16 || **pids > (1 << 22)) return Invalid("resources.pids must be between 16 and 4194304");
      c.pids = static_cast<int>(**pids);
    }
  }
  return c;
}

Result<bool> GetBase64Encoding(const json& body) {
  SBX_ASSIGN_OR_RETURN(std::string enc, GetString(body, "encoding", "text"));
  if (enc != "text" && enc != "base64") return MakeError(Code::kInvalidArgument, "encoding must be \"text\" or \"base64\"");
  return enc == "base64";
}

}  // namespace sbx::api
