// A multipart/form-data upload as E2B's front parses it (a token for one sandbox may send
// any body): the parser must refuse what is malformed and never point outside the body.
// The first byte picks the boundary's length (1 to 70, as RFC 2046 allows), taken from the
// bytes after it; the rest is the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t n = 1 + data[0] % 70;
  if (size < 1 + n) return 0;
  const std::string boundary(reinterpret_cast<const char*>(data + 1), n);
  const std::string_view body(reinterpret_cast<const char*>(data + 1 + n), size - 1 - n);
  auto parts = sbx::api::ParseMultipart(body, boundary);
  if (!parts.ok()) return 0;
  size_t last_end = 0;
  for (const auto& p : *parts) {
    if (p.begin > p.end || p.end > body.size() || p.begin < last_end) abort();
    last_end = p.end;
  }
  (void)sbx::api::HeaderParam(body.substr(0, 256), "boundary");
  return 0;
}
