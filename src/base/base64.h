// Base64 (RFC 4648, the standard alphabet with padding): how byte-exact output and input
// travel in JSON (an exec's "encoding": "base64"). Any thread; no state.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace sbx {

std::string Base64Encode(std::string_view in);
// Appends the encoding of `in` to `out`.
void AppendBase64(std::string_view in, std::string* out);
// kInvalidArgument for anything but padded standard base64 (whitespace is not skipped).
Result<std::string> Base64Decode(std::string_view in);

}  // namespace sbx
