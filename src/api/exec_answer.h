// The JSON answer of a buffered exec, written out in pieces: its output is escaped 64 KiB
// at a time while it is sent, never built whole (control bytes grow six-fold in JSON).
// Each stream's encoded size is capped; output cut there is marked truncated.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/http_types.h"

namespace sbx::api {

// `head`: the answer's other fields (exit_code, timing, ...). stdout_truncated and
// stderr_truncated are set here too when the cap cuts a stream.
// With `base64`, stdout and stderr are the base64 of the bytes (never cut: base64 is
// smaller than the cap allows for).
Response ExecAnswer(int status, nlohmann::json head, std::shared_ptr<const std::string> out,
                    std::shared_ptr<const std::string> err, uint64_t encoded_cap, bool base64 = false);

// JSON string escaping (without the quotes) of `in`, as nlohmann::json writes it with
// invalid UTF-8 replaced by U+FFFD. Appends whole characters from `in[*pos]` on until
// `out` holds at least `stop_at` bytes or the input ends; advances *pos.
void AppendEscaped(std::string_view in, size_t* pos, std::string* out, size_t stop_at = SIZE_MAX);
// How many leading bytes of `in` encode to at most `cap` bytes.
size_t EncodedPrefix(std::string_view in, uint64_t cap);

}  // namespace sbx::api
