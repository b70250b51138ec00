// A multipart/form-data upload as E2B's front reads it (a token for one sandbox may send
// any body), piece by piece as it arrives: the reader must refuse what is malformed, and
// read the same parts whether the body comes whole or in pieces of any size.
// The first byte picks the boundary's length (1 to 70, as RFC 2046 allows), taken from the
// bytes after it; the next byte the piece size; the rest is the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "api/multipart.h"

namespace {

// The events of `body` fed in pieces of `step` bytes, flattened to one string (each
// event's kind, then its fields), and whether the body was well formed.
std::pair<bool, std::string> Read(std::string_view body, const std::string& boundary, size_t step) {
  sbx::api::MultipartReader r(boundary);
  std::vector<sbx::api::MultipartEvent> ev;
  std::string flat;
  bool open = false;
  auto drain = [&] {
    for (auto& e : ev) {
      switch (e.kind) {
        case sbx::api::MultipartEvent::kPart:
          if (open) abort();
          open = true;
          flat += "P" + e.name + '\0' + e.filename + '\0';
          break;
        case sbx::api::MultipartEvent::kData:
          if (!open || e.data.empty()) abort();
          flat += e.data;  // pieces of one part's content join up
          break;
        case sbx::api::MultipartEvent::kPartEnd:
          if (!open) abort();
          open = false;
          flat += "E";
          break;
      }
    }
    ev.clear();
  };
  for (size_t at = 0; at <= body.size(); at += step) {
    if (!r.Feed(body.substr(at, step), &ev).ok()) return {false, ""};
    drain();
  }
  if (!r.Finish().ok()) return {false, ""};
  if (open) abort();
  return {true, flat};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const size_t n = 1 + data[0] % 70;
  const size_t step = 1 + data[1] % 97;
  if (size < 2 + n) return 0;
  const std::string boundary(reinterpret_cast<const char*>(data + 2), n);
  const std::string_view body(reinterpret_cast<const char*>(data + 2 + n), size - 2 - n);
  auto whole = Read(body, boundary, body.size() + 1);
  auto pieces = Read(body, boundary, step);
  if (whole != pieces) abort();
  (void)sbx::api::HeaderParam(body.substr(0, 256), "boundary");
  return 0;
}
