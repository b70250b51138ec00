#include "api/exec_answer.h"

#include <algorithm>
#include <optional>

#include "base/base64.h"

namespace sbx::api {
namespace {

constexpr size_t kPiece = 64 << 10;
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// A UTF-8 lead byte's sequence length and the allowed range of the byte after it (the
// rules of RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); 0: not a
// lead byte.
size_t LeadLength(unsigned char c, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80, *hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) {
    if (c == 0xE0) *lo = 0xA0;
    if (c == 0xED) *hi = 0x9F;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (c == 0xF0) *lo = 0x90;
    if (c == 0xF4) *hi = 0x8F;
    return 4;
  }
  return 0;
}

// How many bytes from in[i] (a byte >= 0x80) form a valid sequence, or its maximal
// invalid prefix (a lead byte and the bytes after it that could still have continued
// it: at least 1), in *len; whether it is valid.
bool Sequence(std::string_view in, size_t i, size_t* len) {
  unsigned char lo, hi;
  size_t want = LeadLength(static_cast<unsigned char>(in[i]), &lo, &hi);
  size_t n = 1;
  while (n < want && i + n < in.size()) {
    auto b = static_cast<unsigned char>(in[i + n]);
    if (n == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) break;
    ++n;
  }
  *len = n;
  return want != 0 && n == want;
}

// The escaped form of the character at in[i] (written to `scratch` if it needs one) and
// how many input bytes it takes. An invalid sequence becomes U+FFFD for its lead byte and
// the continuation bytes that followed it validly.
std::string_view Unit(std::string_view in, size_t i, size_t* used, char (&scratch)[8]) {
  unsigned char c = static_cast<unsigned char>(in[i]);
  *used = 1;
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (c < 0x20) {
    static const char kHex[] = "0123456789abcdef";
    scratch[0] = '\\', scratch[1] = 'u', scratch[2] = '0', scratch[3] = '0';
    scratch[4] = kHex[c >> 4], scratch[5] = kHex[c & 15];
    return std::string_view(scratch, 6);
  }
  if (c < 0x80) return in.substr(i, 1);
  if (Sequence(in, i, used)) return in.substr(i, *used);
  return kReplacement;
}

}  // namespace

void AppendEscaped(std::string_view in, size_t* pos, std::string* out, size_t stop_at) {
  char scratch[8];
  size_t i = *pos;
  while (i < in.size() && out->size() < stop_at) {
    size_t used;
    std::string_view u = Unit(in, i, &used, scratch);
    out->append(u);
    i += used;
  }
  *pos = i;
}

size_t EncodedPrefix(std::string_view in, uint64_t cap) {
  char scratch[8];
  uint64_t total = 0;
  size_t i = 0;
  while (i < in.size()) {
    size_t used;
    std::string_view u = Unit(in, i, &used, scratch);
    if (total + u.size() > cap) break;
    total += u.size();
    i += used;
  }
  return i;
}

Response ExecAnswer(int status, nlohmann::json head, std::shared_ptr<const std::string> out,
                    std::shared_ptr<const std::string> err, uint64_t encoded_cap, bool base64) {
  size_t out_n = base64 ? out->size() : EncodedPrefix(*out, encoded_cap);
  size_t err_n = base64 ? err->size() : EncodedPrefix(*err, encoded_cap);
  if (out_n < out->size()) head["stdout_truncated"] = true;
  if (err_n < err->size()) head["stderr_truncated"] = true;
  std::string start = head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  start.pop_back();  // the closing brace: the output fields follow
  Response r;
  r.status = status;
  r.stream = [start = std::move(start), out, err, out_n, err_n, base64](ChunkSink sink)
      -> boost::asio::awaitable<std::optional<Response>> {
    std::string buf = start;
    buf.reserve(kPiece + 64);
    const std::string_view streams[2] = {std::string_view(*err).substr(0, err_n),
                                         std::string_view(*out).substr(0, out_n)};
    for (int k = 0; k < 2; ++k) {
      buf += k == 0 ? ",\"stderr\":\"" : "\",\"stdout\":\"";
      size_t pos = 0;
      while (pos < streams[k].size()) {
        if (base64) {
          size_t take = std::min(streams[k].size() - pos, kPiece / 4 * 3);  // whole 3-byte groups
          AppendBase64(streams[k].substr(pos, take), &buf);
          pos += take;
        } else {
          AppendEscaped(streams[k], &pos, &buf, kPiece);
        }
        if (buf.size() >= kPiece) {
          if (!co_await sink(buf)) co_return std::nullopt;
          buf.clear();
        }
      }
    }
    buf += "\"}";
    co_await sink(buf);
    co_return std::nullopt;
  };
  return r;
}

}  // namespace sbx::api
