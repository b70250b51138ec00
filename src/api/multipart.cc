// multipart/form-data bodies (RFC 7578), as E2B's SDK uploads files.
#include "api/multipart.h"

#include <cctype>

namespace sbx::api {

std::string HeaderParam(std::string_view v, const std::string& name) {
  // Parameter names are case-insensitive, their values not: found in a lower-case copy,
  // taken from the original.
  std::string lower(v), key = name + "=";
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = 0;
  while ((at = lower.find(key, at)) != std::string::npos) {
    if (at > 0 && v[at - 1] != ';' && v[at - 1] != ' ') {
      at += name.size();
      continue;
    }
    std::string_view rest = v.substr(at + name.size() + 1);
    if (!rest.empty() && rest[0] == '"') {
      size_t close = rest.find('"', 1);
      return std::string(rest.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
    }
    return std::string(rest.substr(0, rest.find(';')));
  }
  return "";
}

Result<std::vector<MultipartPart>> ParseMultipart(std::string_view body, const std::string& boundary) {
  const std::string delim = "--" + boundary;
  size_t pos = body.find(delim);
  if (boundary.empty() || pos == std::string_view::npos)
    return MakeError(Code::kInvalidArgument, "the multipart body has no boundary line");
  std::vector<MultipartPart> parts;
  while (true) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") return parts;
    if (body.substr(pos, 2) != "\r\n") return MakeError(Code::kInvalidArgument, "a multipart boundary line is malformed");
    pos += 2;
    // The blank line that ends the part's headers (from the boundary line's own CRLF on:
    // a part may have no header at all).
    size_t head_end = body.find("\r\n\r\n", pos - 2);
    if (head_end == std::string_view::npos) return MakeError(Code::kInvalidArgument, "a multipart part has no end of headers");
    MultipartPart p;
    std::string_view head = head_end + 2 > pos ? body.substr(pos, head_end + 2 - pos) : std::string_view();
    for (size_t line = 0; line < head.size();) {
      size_t eol = head.find("\r\n", line);
      std::string_view h = head.substr(line, eol - line);
      line = eol + 2;
      size_t colon = h.find(':');
      if (colon == std::string_view::npos) continue;
      std::string name(h.substr(0, colon));
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (name != "content-disposition") continue;
      p.name = HeaderParam(h.substr(colon + 1), "name");
      p.filename = HeaderParam(h.substr(colon + 1), "filename");
    }
    p.begin = head_end + 4;
    // The next delimiter line: the boundary after a CRLF, then a CRLF or "--" (a line that
    // only starts like it is content).
    size_t next = p.begin;
    while (true) {
      next = body.find("\r\n" + delim, next);
      if (next == std::string_view::npos) return MakeError(Code::kInvalidArgument, "a multipart part does not end");
      std::string_view after = body.substr(next + 2 + delim.size(), 2);
      if (after == "\r\n" || after == "--") break;
      ++next;
    }
    p.end = next;
    parts.push_back(std::move(p));
    pos = next + 2;
  }
}

}  // namespace sbx::api
