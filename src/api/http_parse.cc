// Request-line and query decoding, shared by the server and the HTTP fuzz harness.
#include <cctype>
#include <string>

#include "api/http_request.h"

namespace sbx::api {

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void ParseTarget(std::string_view target, Request& req) {
  size_t q = target.find('?');
  // Kept encoded: the router splits on '/' first, then decodes each segment, so an
  // encoded slash stays inside its segment (and fails the id check).
  req.path = std::string(target.substr(0, q));
  if (q == std::string_view::npos) return;
  std::string_view qs = target.substr(q + 1);
  while (!qs.empty()) {
    size_t amp = qs.find('&');
    std::string_view kv = qs.substr(0, amp);
    size_t eq = kv.find('=');
    std::string k = PercentDecode(kv.substr(0, eq), true);
    std::string v = eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), true);
    if (!k.empty()) req.query[k] = v;
    if (amp == std::string_view::npos) break;
    qs = qs.substr(amp + 1);
  }
}

}  // namespace sbx::api
