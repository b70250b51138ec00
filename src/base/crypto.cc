#include "base/crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <memory>

namespace sbx {
namespace {

std::string ToHex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  return out;
}

using Ctx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;
constexpr int kNonce = 12, kTag = 16;

}  // namespace

std::string FromHex(const std::string& hex) {
  if (hex.size() % 2) return "";
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = hex[2 * i + k];
      int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (x < 0) return "";
      v = v * 16 + x;
    }
    out[i] = static_cast<char>(v);
  }
  return out;
}

std::string HmacSha256Hex(const std::string& key, const std::string& msg) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), md, &len);
  return ToHex(md, len);
}

Result<std::string> Seal(const std::string& key, const std::string& plaintext) {
  if (key.size() != 32) return MakeError(Code::kInternal, "seal: the key must be 32 bytes");
  unsigned char nonce[kNonce];
  if (RAND_bytes(nonce, kNonce) != 1) return MakeError(Code::kInternal, "seal: no random bytes");
  Ctx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  std::string ct(plaintext.size() + kTag, '\0');
  auto* out = reinterpret_cast<unsigned char*>(ct.data());
  int n = 0, m = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                                 reinterpret_cast<const unsigned char*>(key.data()), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), out, &n, reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out + n, &m) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTag, out + n + m) != 1)
    return MakeError(Code::kInternal, "seal: AES-256-GCM failed");
  return ToHex(nonce, kNonce) + ToHex(out, n + m + kTag);
}

Result<std::string> Unseal(const std::string& key, const std::string& sealed_hex) {
  std::string raw = FromHex(sealed_hex);
  if (key.size() != 32 || raw.size() < kNonce + kTag) return MakeError(Code::kInternal, "unseal: malformed");
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  int ct_len = static_cast<int>(raw.size()) - kNonce - kTag;
  std::string pt(ct_len, '\0');
  auto* out = reinterpret_cast<unsigned char*>(pt.data());
  Ctx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int n = 0, m = 0;
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, reinterpret_cast<const unsigned char*>(key.data()),
                         p) != 1 ||
      EVP_DecryptUpdate(ctx.get(), out, &n, p + kNonce, ct_len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTag, const_cast<unsigned char*>(p + kNonce + ct_len)) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), out + n, &m) != 1)
    return MakeError(Code::kInternal, "unseal: the sealed text is corrupt or the key is another");
  pt.resize(n + m);
  return pt;
}

}  // namespace sbx
