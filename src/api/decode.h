// Decoding of request bodies: strict JSON objects (unknown fields refused) into the
// manager's request types. Pure functions (no I/O), so they can be fuzzed alone.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "core/requests.h"

namespace sbx::api {

// A request body's JSON, parsed with a bounded cost: at most kMaxJsonValues values,
// nested at most kMaxJsonDepth deep, checked by a pass that builds nothing before the
// document is built (so sbxd's memory for one body stays a small multiple of its size,
// however the body is shaped). Values past either bound are kInvalidArgument, as is text
// that is not JSON.
constexpr size_t kMaxJsonValues = 100000;
constexpr size_t kMaxJsonDepth = 64;
Result<nlohmann::json> ParseJson(std::string_view text);
// An object with only the allowed fields (an empty body is {}).
Result<nlohmann::json> ParseObject(const std::string& body, const std::set<std::string>& allowed);
Result<std::string> GetString(const nlohmann::json& j, const char* key, const std::string& def = "");
// An optional name: absent or null is "" (no name); present, it must be a valid name
// ([a-z0-9][a-z0-9._-]{0,62}), so an empty or bad one is 400, never "no name".
Result<std::string> GetName(const nlohmann::json& j, const char* key);
Result<std::optional<int64_t>> GetInt(const nlohmann::json& j, const char* key);
Result<bool> GetBool(const nlohmann::json& j, const char* key, bool def);
Result<std::map<std::string, std::string>> GetStringMap(const nlohmann::json& j, const char* key);
// The "cmd" of an exec: a non-empty string (for a shell; returned in *shell) or a
// non-empty array of strings (the argv; appended to *argv).
Status ParseCmd(const nlohmann::json& body, std::string* shell, std::vector<std::string>* argv);
// The command of an exec or a background process: "cmd" (a string runs with /bin/sh -c),
// "cwd", "env" and "user", into *e.
Status DecodeCommand(const nlohmann::json& body, core::ExecRequest* e);
// An exec's "encoding": false for "text" (the default), true for "base64" (stdout, stderr
// and streamed data in base64, and "stdin" read as base64).
Result<bool> GetBase64Encoding(const nlohmann::json& body);

// The body of POST /v1/sandboxes.
Result<core::CreateRequest> DecodeCreate(const std::string& body);

}  // namespace sbx::api
