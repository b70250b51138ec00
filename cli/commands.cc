// What the CLI's command files share (commands.h).
#include "commands.h"

#include <cctype>
#include <cstdio>

namespace sbx::cli {

using nlohmann::json;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "sbx: %s\n", msg.c_str());
  return 1;
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "sbx: %s\n", msg.c_str());
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
