#include "base/base64.h"

#include <cstdint>

namespace sbx {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

void AppendBase64(std::string_view in, std::string* out) {
  out->reserve(out->size() + (in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(kAlphabet[(v >> 6) & 63]);
    out->push_back(kAlphabet[v & 63]);
  }
  size_t rest = in.size() - i;
  if (rest == 0) return;
  uint32_t v = static_cast<unsigned char>(in[i]) << 16;
  if (rest == 2) v |= static_cast<unsigned char>(in[i + 1]) << 8;
  out->push_back(kAlphabet[(v >> 18) & 63]);
  out->push_back(kAlphabet[(v >> 12) & 63]);
  out->push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
  out->push_back('=');
}

std::string Base64Encode(std::string_view in) {
  std::string out;
  AppendBase64(in, &out);
  return out;
}

Result<std::string> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return MakeError(Code::kInvalidArgument, "not base64: its length is not a multiple of 4");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int a = Value(in[i]), b = Value(in[i + 1]);
    bool last = i + 4 == in.size();
    int c = in[i + 2] == '=' && last && in[i + 3] == '=' ? -2 : Value(in[i + 2]);
    int d = in[i + 3] == '=' && last ? -2 : Value(in[i + 3]);
    if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2))
      return MakeError(Code::kInvalidArgument, "not base64: a character outside the alphabet, or misplaced padding");
    out.push_back(static_cast<char>((a << 2) | (b >> 4)));
    if (c >= 0) out.push_back(static_cast<char>(((b & 15) << 4) | (c >> 2)));
    if (d >= 0) out.push_back(static_cast<char>(((c & 3) << 6) | d));
  }
  return out;
}

}  // namespace sbx
