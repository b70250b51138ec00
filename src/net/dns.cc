#include "net/dns.h"

namespace sbx::net::dns {

namespace {

uint16_t U16(const std::string& m, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(m[at]) << 8) | static_cast<uint8_t>(m[at + 1]));
}
uint32_t U32(const std::string& m, size_t at) { return (uint32_t{U16(m, at)} << 16) | U16(m, at + 2); }

// Reads the name at *at (advancing it past the name as written there); nullopt if it is
// malformed. Pointers must point backwards, so a loop cannot form.
std::optional<std::string> ReadName(const std::string& m, size_t* at) {
  std::string name;
  size_t pos = *at;
  bool jumped = false;
  for (int labels = 0; labels < 128; ++labels) {
    if (pos >= m.size()) return std::nullopt;
    const auto len = static_cast<uint8_t>(m[pos]);
    if (len == 0) {
      if (!jumped) *at = pos + 1;
      if (name.empty()) return std::string(".");
      return NormalizeName(name);
    }
    if ((len & 0xC0) == 0xC0) {
      if (pos + 1 >= m.size()) return std::nullopt;
      size_t target = ((len & 0x3F) << 8) | static_cast<uint8_t>(m[pos + 1]);
      if (target >= pos) return std::nullopt;
      if (!jumped) *at = pos + 2;
      jumped = true;
      pos = target;
      continue;
    }
    if ((len & 0xC0) != 0 || pos + 1 + len > m.size()) return std::nullopt;
    // A dot inside a label would make ["a.example", "com"] pass for a.example.com.
    if (m.find('.', pos + 1) < pos + 1 + len) return std::nullopt;
    if (!name.empty()) name += '.';
    name.append(m, pos + 1, len);
    if (name.size() > 255) return std::nullopt;
    pos += 1 + len;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Question> ParseQuery(const std::string& m) {
  if (m.size() < 12 || m.size() > 4096) return std::nullopt;
  if (m[2] & 0x80) return std::nullopt;           // a response, not a query
  if (((m[2] >> 3) & 0x0F) != 0) return std::nullopt;  // not a standard query
  if (U16(m, 4) != 1) return std::nullopt;
  size_t at = 12;
  auto name = ReadName(m, &at);
  if (!name || at + 4 > m.size()) return std::nullopt;
  return Question{U16(m, 0), *name, U16(m, at)};
}

std::optional<Answer> ParseAnswer(const std::string& m) {
  if (m.size() < 12 || !(m[2] & 0x80)) return std::nullopt;
  Answer a;
  a.id = U16(m, 0);
  a.rcode = m[3] & 0x0F;
  const uint16_t qd = U16(m, 4), an = U16(m, 6);
  size_t at = 12;
  for (uint16_t i = 0; i < qd; ++i) {
    auto name = ReadName(m, &at);
    if (!name || at + 4 > m.size()) return std::nullopt;
    if (i == 0) a.question = *name;
    at += 4;
  }
  for (uint16_t i = 0; i < an; ++i) {
    auto name = ReadName(m, &at);
    if (!name || at + 10 > m.size()) return std::nullopt;
    const uint16_t type = U16(m, at), cls = U16(m, at + 2);
    const uint32_t ttl = U32(m, at + 4);
    const uint16_t len = U16(m, at + 8);
    at += 10;
    if (at + len > m.size()) return std::nullopt;
    if (cls == 1 && ((type == kTypeA && len == 4) || (type == kTypeAAAA && len == 16))) {
      Address addr;
      addr.v6 = type == kTypeAAAA;
      std::copy_n(m.begin() + static_cast<std::ptrdiff_t>(at), len, addr.bytes.begin());
      a.addresses.emplace_back(addr, ttl);
    }
    at += len;
  }
  return a;
}

std::string Refusal(const std::string& query, int rcode) {
  // The header and the one question, as asked.
  size_t at = 12;
  std::string out = query.substr(0, 12);
  if (ReadName(query, &at) && at + 4 <= query.size()) out = query.substr(0, at + 4);
  out[2] = static_cast<char>((out[2] & 0x79) | 0x80);  // QR, opcode 0 kept, RD kept, AA and TC clear
  out[3] = static_cast<char>(0x80 | (rcode & 0x0F));    // RA
  out[4] = 0;
  out[5] = out.size() > 12 ? 1 : 0;
  for (int i = 6; i < 12; ++i) out[i] = 0;
  return out;
}

void SetId(std::string* m, uint16_t id) {
  if (m->size() < 2) return;
  (*m)[0] = static_cast<char>(id >> 8);
  (*m)[1] = static_cast<char>(id & 0xFF);
}

}  // namespace sbx::net::dns
