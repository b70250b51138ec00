// Keyed hashing and sealing for sbxd's own secrets: HMAC-SHA256 (sandbox tokens) and
// AES-256-GCM (daemon secrets at rest). OpenSSL underneath. Any thread.
#pragma once

#include <string>

#include "base/result.h"

namespace sbx {

// Lowercase hex of HMAC-SHA256(key, msg).
std::string HmacSha256Hex(const std::string& key, const std::string& msg);
// AES-256-GCM with a random 96-bit nonce; the result is hex(nonce | ciphertext | tag).
// `key` is 32 raw bytes.
Result<std::string> Seal(const std::string& key, const std::string& plaintext);
// The inverse; fails if the text was changed or the key is another.
Result<std::string> Unseal(const std::string& key, const std::string& sealed_hex);
// Hex to bytes ("" on a malformed input).
std::string FromHex(const std::string& hex);

}  // namespace sbx
