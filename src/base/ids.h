// Ids, names and times. Any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace sbx {

// True if `s` matches [a-z0-9][a-z0-9._-]{0,62}.
bool ValidName(const std::string& s);
// "<prefix>-" followed by 16 random lowercase hex digits.
std::string NewId(const std::string& prefix);
// The one of `ids` that `ref` begins, with or without `id_prefix` ("sb-"): kNotFound when
// none does, kInvalidArgument ("ambiguous: ...", naming up to five) when several do.
// `kind` names what they are ("sandbox", "disk").
Result<std::string> PickByIdPrefix(const std::string& ref, const std::vector<std::string>& ids,
                                   const std::string& id_prefix, const std::string& kind);
// Random bytes as hex from the kernel's CSPRNG.
std::string RandomHex(size_t bytes);
int64_t NowUnixMs();
// Microseconds on the monotonic clock (arrival times, latencies).
int64_t SteadyUs();
std::string FormatRfc3339(int64_t unix_ms);
// Unix milliseconds from "2026-11-30T13:52:16Z" (fraction and +hh:mm offset allowed) or
// from a number of Unix seconds; -1 if it is neither.
int64_t ParseTimeMs(const std::string& s);
// SHA-256 of `data` as lowercase hex (for API key hashes).
std::string Sha256Hex(const std::string& data);

}  // namespace sbx
