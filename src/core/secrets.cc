#include "core/secrets.h"

#include <cctype>

#include "base/crypto.h"
#include "base/ids.h"

namespace sbx::core {

namespace {
bool ValidEnvName(const std::string& n) {
  if (n.empty() || n.size() > 128 || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return n.rfind("SBX_", 0) != 0;
}
}  // namespace

Status Secrets::Set(const std::string& name, const std::string& value) {
  if (key_.empty()) return MakeError(Code::kFailedPrecondition, "secrets are off on this sbxd");
  if (!ValidEnvName(name))
    return MakeError(Code::kInvalidArgument,
                     "invalid secret name: an environment name [A-Za-z_][A-Za-z0-9_]{0,127}, not starting with SBX_");
  if (value.size() > 65536) return MakeError(Code::kInvalidArgument, "a secret's value is at most 65536 bytes");
  if (value.find('\0') != std::string::npos) return MakeError(Code::kInvalidArgument, "a secret's value holds a NUL byte");
  SBX_ASSIGN_OR_RETURN(std::string sealed, Seal(key_, value));
  MutexLock lock(mu_);
  SBX_RETURN_IF_ERROR(store_->PutSecret(name, sealed, now_ms_()));
  values_[name] = value;
  return OkStatus();
}

Result<std::vector<std::pair<std::string, int64_t>>> Secrets::List() const {
  SBX_ASSIGN_OR_RETURN(auto rows, store_->ListSecrets());
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& r : rows) out.emplace_back(r.name, r.updated_ms);
  return out;
}

Status Secrets::Delete(const std::string& name) {
  if (!ValidEnvName(name)) return MakeError(Code::kInvalidArgument, "invalid secret name");
  MutexLock lock(mu_);
  SBX_ASSIGN_OR_RETURN(bool gone, store_->DeleteSecret(name));
  if (!gone) return MakeError(Code::kNotFound, "secret " + name + " not found");
  values_.erase(name);
  return OkStatus();
}

Status Secrets::Load() {
  if (key_.empty()) return OkStatus();
  SBX_ASSIGN_OR_RETURN(auto rows, store_->ListSecrets());
  MutexLock lock(mu_);
  for (const auto& r : rows) {
    auto v = Unseal(key_, r.sealed);
    if (!v.ok()) return v.error().Wrap("secret " + r.name);
    values_[r.name] = *v;
  }
  return OkStatus();
}

void Secrets::AddTo(std::map<std::string, std::string>& env) const {
  MutexLock lock(mu_);
  for (const auto& [k, v] : values_) env[k] = v;
}

bool Secrets::Any() const {
  MutexLock lock(mu_);
  return !values_.empty();
}

std::string Secrets::TokenFor(const std::string& id, int64_t gen) const {
  if (key_.empty()) return "";
  const std::string what = "sandbox-token:" + id + (gen == 0 ? "" : ":" + std::to_string(gen));
  return "sbt_" + id + "_" + HmacSha256Hex(key_, what).substr(0, 48);
}

std::optional<std::string> Secrets::IdOfToken(const std::string& token) {
  if (token.rfind("sbt_", 0) != 0) return std::nullopt;
  auto sep = token.rfind('_');
  if (sep <= 4) return std::nullopt;
  std::string id = token.substr(4, sep - 4);
  if (!ValidName(id)) return std::nullopt;
  return id;
}

// True if `got` is `want` (not empty), compared in constant time.
static bool SameSecret(const std::string& want, const std::string& got) {
  if (want.empty() || want.size() != got.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= want[i] ^ got[i];
  return diff == 0;
}

bool Secrets::CheckToken(const std::string& token, const std::string& id, int64_t gen) const {
  return SameSecret(TokenFor(id, gen), token);
}

std::string Secrets::AccessTokenFor(const std::string& id) const {
  if (key_.empty()) return "";
  return "sba_" + HmacSha256Hex(key_, "access-token:" + id).substr(0, 48);
}

bool Secrets::CheckAccessToken(const std::string& id, const std::string& token) const {
  return SameSecret(AccessTokenFor(id), token);
}

std::string Secrets::PortGrant(const std::string& id, int port, int64_t expires) const {
  if (key_.empty()) return "";
  std::string e = std::to_string(expires);
  return e + "." + HmacSha256Hex(key_, "port-grant:" + id + ":" + std::to_string(port) + ":" + e).substr(0, 40);
}

bool Secrets::CheckPortGrant(const std::string& grant, const std::string& id, int port, int64_t now) const {
  size_t dot = grant.find('.');
  if (key_.empty() || dot == 0 || dot == std::string::npos || dot > 12) return false;
  std::string e = grant.substr(0, dot);
  if (e.find_first_not_of("0123456789") != std::string::npos) return false;
  int64_t expires = std::stoll(e);
  if (expires < now) return false;
  std::string want = PortGrant(id, port, expires);
  if (want.size() != grant.size()) return false;
  unsigned char diff = 0;  // constant time
  for (size_t i = 0; i < want.size(); ++i) diff |= want[i] ^ grant[i];
  return diff == 0;
}

}  // namespace sbx::core
