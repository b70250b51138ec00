// What the CLI's command files share (commands.h).
#include "commands.h"

#include <cctype>
#include <cstdio>

namespace sbx::cli {

using nlohmann::json;

namespace {
bool g_json_errors = false;
}  // namespace

void SetJsonErrors(bool on) { g_json_errors = on; }

void ReportError(const std::string& msg, const std::string& fallback_code) {
  if (!g_json_errors) {
    std::fprintf(stderr, "sbx: %s\n", msg.c_str());
    return;
  }
  // The API's own code when the failure was an answer of sbxd's, without the " (code)"
  // that the text form appends.
  std::string code = LastErrorCode().empty() ? fallback_code : LastErrorCode();
  std::string text = msg, suffix = " (" + code + ")";
  if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0)
    text.resize(text.size() - suffix.size());
  json e = {{"error", {{"code", code}, {"message", text}}}};
  std::fprintf(stderr, "%s\n", e.dump().c_str());
}

int Fail(const std::string& msg) {
  ReportError(msg, "client_error");
  return 1;
}

int Usage(const std::string& msg) {
  ReportError(msg, "invalid_request");
  return 2;
}

std::string Str(const json& j, const char* k) {
  return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "-";
}

std::string PercentEncode(const std::string& v) {
  std::string out;
  for (unsigned char ch : v) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

}  // namespace sbx::cli
