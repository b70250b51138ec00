// Request-line and query decoding, shared by the server and the HTTP fuzz harness.
#include <cctype>
#include <string>

#include "api/http_request.h"

namespace sbx::api {

std::vector<std::string_view> CookiePairs(std::string_view header) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < header.size()) {
    size_t semi = header.find(';', pos);
    if (semi == std::string_view::npos) semi = header.size();
    std::string_view c = header.substr(pos, semi - pos);
    while (!c.empty() && c.front() == ' ') c.remove_prefix(1);
    if (!c.empty()) out.push_back(c);
    pos = semi + 1;
  }
  return out;
}

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

bool HasObsFold(std::string_view head) {
  // Every line after the request line that starts with a space or a tab continues the
  // line before it (obs-fold, RFC 9112 5.2): a server must reject it or replace it, and
  // sbx rejects it, as a proxy in front of sbx might read it another way.
  size_t at = head.find("\r\n");
  while (at != std::string_view::npos && at + 2 < head.size()) {
    char c = head[at + 2];
    if (c == ' ' || c == '\t') return true;
    at = head.find("\r\n", at + 2);
  }
  return false;
}

std::string CheckTransferEncoding(const std::vector<std::string>& fields, bool has_content_length) {
  if (fields.empty()) return "";
  if (has_content_length) return "Transfer-Encoding and Content-Length together";
  std::vector<std::string> codings;
  std::string shown;
  for (const auto& v : fields) {
    shown += (shown.empty() ? "" : ", ") + v;
    size_t start = 0;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string::npos) comma = v.size();
      std::string tok = v.substr(start, comma - start);
      size_t b = tok.find_first_not_of(" \t"), e = tok.find_last_not_of(" \t");
      tok = b == std::string::npos ? "" : tok.substr(b, e - b + 1);
      for (auto& c : tok) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!tok.empty()) codings.push_back(tok);
      start = comma + 1;
    }
  }
  if (codings.size() == 1 && codings[0] == "chunked") return "";
  return "unsupported Transfer-Encoding \"" + shown.substr(0, 100) + "\": only a single \"chunked\" is accepted";
}

}  // namespace sbx::api
