// Raw bytes as an HTTP/1.1 request: Beast's parser with sbxd's limits, then what sbxd
// does with the head (target split, query and segment decoding, header names).
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

#include "api/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  http::request_parser<http::string_body> p;
  p.header_limit(64 * 1024);
  p.body_limit(1 << 20);
  p.eager(true);
  boost::beast::error_code ec;
  size_t off = 0;
  while (off < size && !p.is_done()) {
    size_t n = p.put(boost::asio::buffer(data + off, size - off), ec);
    if (ec) break;
    if (n == 0) break;
    off += n;
  }
  // sbxd's own framing checks: obs-fold on the raw header section, Transfer-Encoding.
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  size_t end = raw.find("\r\n\r\n");
  bool folded = end != std::string_view::npos && sbx::api::HasObsFold(raw.substr(0, end + 4));
  if (!p.is_header_done()) return 0;
  const auto& h = p.get();
  std::vector<std::string> codings;
  for (auto [it, e] = h.equal_range(http::field::transfer_encoding); it != e; ++it) codings.emplace_back(it->value());
  std::string bad = sbx::api::CheckTransferEncoding(codings, h.find(http::field::content_length) != h.end());
  // A request sbxd accepts has one final "chunked" or none, and it never folds.
  if (bad.empty() && !codings.empty() && !p.chunked()) __builtin_trap();
  (void)folded;
  sbx::api::Request req;
  req.method = std::string(h.method_string());
  sbx::api::ParseTarget(std::string_view(h.target().data(), h.target().size()), req);
  for (const auto& f : h) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers[name] = std::string(f.value());
  }
  // The router's view: segments split on '/', then each decoded.
  std::stringstream ss(req.path);
  std::string seg;
  size_t total = 0;
  while (std::getline(ss, seg, '/'))
    if (!seg.empty()) total += sbx::api::PercentDecode(seg, false).size();
  if (total > req.path.size()) __builtin_trap();  // decoding never grows a segment
  return 0;
}
