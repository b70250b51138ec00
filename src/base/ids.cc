#include "base/ids.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

namespace sbx {

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(s[0])) return false;
  for (char c : s)
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += n;
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string NewId(const std::string& prefix) { return prefix + "-" + RandomHex(8); }

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatRfc3339(int64_t unix_ms) {
  std::time_t t = unix_ms / 1000;
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t ParseTimeMs(const std::string& s) {
  if (s.empty() || s.size() > 40) return -1;
  char* end = nullptr;
  if (s.find_first_not_of("0123456789.") == std::string::npos) {
    double secs = std::strtod(s.c_str(), &end);
    if (*end || secs < 0 || secs > 1e11) return -1;
    return static_cast<int64_t>(std::llround(secs * 1000));
  }
  struct tm tm = {};
  const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) return -1;
  int64_t ms = 0;
  if (*rest == '.') {
    int64_t scale = 100;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest, scale /= 10) ms += (*rest - '0') * scale;
  }
  int64_t offset_s = 0;
  if (*rest == 'Z' || *rest == 'z') {
    ++rest;
  } else if (*rest == '+' || *rest == '-') {
    // Exactly "+hh:mm" (the fuzzer found that a scanf would accept "+0:00" and step past
    // the end).
    auto digit = [&](int i) { return rest[i] >= '0' && rest[i] <= '9'; };
    if (!(digit(1) && digit(2) && rest[3] == ':' && digit(4) && digit(5))) return -1;
    int sign = *rest == '-' ? -1 : 1;
    int hh = (rest[1] - '0') * 10 + (rest[2] - '0'), mm = (rest[4] - '0') * 10 + (rest[5] - '0');
    if (hh > 23 || mm > 59) return -1;
    offset_s = sign * (hh * 3600 + mm * 60);
    rest += 6;
  } else {
    return -1;
  }
  if (*rest) return -1;
  time_t t = timegm(&tm);
  if (t < 0) return -1;
  return (static_cast<int64_t>(t) - offset_s) * 1000 + ms;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

Result<std::string> PickByIdPrefix(const std::string& ref, const std::vector<std::string>& ids,
                                   const std::string& id_prefix, const std::string& kind) {
  std::vector<std::string> hits;
  if (!ref.empty())
    for (const auto& id : ids)
      if (id.rfind(ref, 0) == 0 || id.rfind(id_prefix + ref, 0) == 0) hits.push_back(id);
  if (hits.size() == 1) return hits[0];
  if (hits.empty()) return MakeError(Code::kNotFound, kind + " " + ref + " not found");
  std::string shown;
  for (size_t i = 0; i < hits.size() && i < 5; ++i) shown += (i ? ", " : "") + hits[i];
  return MakeError(Code::kInvalidArgument, "ambiguous: \"" + ref + "\" begins the ids of " +
                                               std::to_string(hits.size()) + " " + kind + "s (" + shown +
                                               (hits.size() > 5 ? ", ..." : "") + "); give more of the id");
}

}  // namespace sbx
