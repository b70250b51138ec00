// multipart/form-data bodies (RFC 7578), as E2B's SDK uploads files: the parts of a body
// already held whole (in memory, or a mapped file), found without copying them. Pure
// parsing of untrusted bytes (fuzzed: fuzz/multipart_fuzz.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace sbx::api {

// One part: where its content lies in the body, and its Content-Disposition's name and
// filename parameters ("" when absent).
struct MultipartPart {
  size_t begin = 0, end = 0;
  std::string name, filename;
};

// A parameter of a header value such as Content-Type or Content-Disposition
// (`name="x"` or `name=x`), "" when absent.
std::string HeaderParam(std::string_view value, const std::string& name);

// The parts of `body` delimited by `boundary`, in order, or kInvalidArgument naming what
// is malformed. Each part's content is body[begin, end): begin <= end <= body.size(),
// and each part begins after the previous one ends.
Result<std::vector<MultipartPart>> ParseMultipart(std::string_view body, const std::string& boundary);

}  // namespace sbx::api
