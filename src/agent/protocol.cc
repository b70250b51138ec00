#include "agent/protocol.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/base64.h"
#include "base/unique_fd.h"

namespace sbx::agent {

using nlohmann::json;

std::string EncodeHeader(FrameType type, uint32_t len) {
  std::string h(kHeaderSize, '\0');
  h[0] = static_cast<char>(len & 0xff);
  h[1] = static_cast<char>((len >> 8) & 0xff);
  h[2] = static_cast<char>((len >> 16) & 0xff);
  h[3] = static_cast<char>((len >> 24) & 0xff);
  h[4] = static_cast<char>(type);
  return h;
}

std::string EncodeFrame(FrameType type, std::string_view payload) {
  std::string f = EncodeHeader(type, static_cast<uint32_t>(payload.size()));
  f.append(payload);
  return f;
}

Result<std::pair<FrameType, uint32_t>> DecodeHeader(const unsigned char* h) {
  uint32_t len = h[0] | (h[1] << 8) | (h[2] << 16) | (static_cast<uint32_t>(h[3]) << 24);
  uint8_t t = h[4];
  if (t < 1 || t > static_cast<uint8_t>(kLastFrameType))
    return MakeError(Code::kInvalidArgument, "agent protocol: unknown frame type " + std::to_string(t));
  if (h[5] || h[6] || h[7])
    return MakeError(Code::kInvalidArgument, "agent protocol: reserved header bytes set");
  if (len > kMaxPayload)
    return MakeError(Code::kInvalidArgument, "agent protocol: frame of " + std::to_string(len) +
                                                 " bytes exceeds the limit");
  return std::make_pair(static_cast<FrameType>(t), len);
}

Result<std::optional<Frame>> FrameDecoder::Next() {
  if (buf_.size() < kHeaderSize) return std::optional<Frame>();
  auto h = DecodeHeader(reinterpret_cast<const unsigned char*>(buf_.data()));
  if (!h.ok()) return h.error();
  auto [type, len] = *h;
  if (buf_.size() < kHeaderSize + len) return std::optional<Frame>();
  Frame f{type, buf_.substr(kHeaderSize, len)};
  buf_.erase(0, kHeaderSize + len);
  return std::optional<Frame>(std::move(f));
}

Error ErrorOfFrame(const std::string& payload, Code if_none) {
  auto j = json::parse(payload, nullptr, false);
  if (!j.is_object()) return MakeError(if_none, payload);
  auto message = j.find("message"), code = j.find("code");
  return MakeError(code != j.end() && code->is_string() ? CodeOfName(code->get<std::string>()) : if_none,
                   message != j.end() && message->is_string() ? message->get<std::string>() : payload);
}

std::string ExecRequest::ToJson() const {
  json j = {{"v", user.empty() ? version : kUserProtocolVersion}, {"argv", argv}, {"env", env},
            {"cwd", cwd},           {"timeout_ms", timeout_ms}, {"stdout_cap", stdout_cap},
            {"stderr_cap", stderr_cap}, {"stdin_open", stdin_open}, {"keepalive_ms", keepalive_ms}};
  if (report_pid) j["report_pid"] = true;
  if (!user.empty()) j["user"] = user;
  if (!self_env.empty()) j["self_env"] = self_env;
  if (tty) {
    j["tty"] = true;
    j["cols"] = cols;
    j["rows"] = rows;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<ExecRequest> ExecRequest::FromJson(std::string_view s) {
  json j = json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return MakeError(Code::kInvalidArgument, "exec request is not a JSON object");
  ExecRequest r;
  try {
    r.version = j.value("v", 0u);
    if (r.version != kProtocolVersion && r.version != kUserProtocolVersion)
      return MakeError(Code::kInvalidArgument,
                       "unsupported protocol version " + std::to_string(r.version));
    r.argv = j.at("argv").get<std::vector<std::string>>();
    r.env = j.value("env", std::vector<std::string>{});
    r.cwd = j.value("cwd", std::string());
    r.timeout_ms = j.value("timeout_ms", int64_t{0});
    r.stdout_cap = j.value("stdout_cap", uint64_t{16 << 20});
    r.stderr_cap = j.value("stderr_cap", uint64_t{16 << 20});
    r.stdin_open = j.value("stdin_open", false);
    r.keepalive_ms = j.value("keepalive_ms", int64_t{15000});
    r.report_pid = j.value("report_pid", false);
    r.user = j.value("user", std::string());
    r.self_env = j.value("self_env", std::string());
    r.tty = j.value("tty", false);
    r.cols = j.value("cols", 80);
    r.rows = j.value("rows", 24);
    if (r.cols < 1 || r.cols > 10000 || r.rows < 1 || r.rows > 10000)
      return MakeError(Code::kInvalidArgument, "terminal size out of range");
    if (r.keepalive_ms < 10) r.keepalive_ms = 10;
  } catch (const std::exception& e) {
    return MakeError(Code::kInvalidArgument, std::string("bad exec request: ") + e.what());
  }
  if (r.argv.empty() || r.argv[0].empty())
    return MakeError(Code::kInvalidArgument, "exec request has an empty argv");
  for (const auto& a : r.argv)
    if (a.find('\0') != std::string::npos)
      return MakeError(Code::kInvalidArgument, "argv holds a NUL byte");
  for (const auto& e : r.env)
    if (e.find('\0') != std::string::npos || e.find('=') == std::string::npos || e[0] == '=')
      return MakeError(Code::kInvalidArgument, "bad environment entry");
  return r;
}

std::string ExitInfo::ToJson() const {
  json j = {{"exit_code", exit_code},     {"signal", signal},
            {"timed_out", timed_out},     {"stdout_truncated", stdout_truncated},
            {"stderr_truncated", stderr_truncated}, {"execute_us", execute_us}};
  return j.dump();
}

Result<ExitInfo> ExitInfo::FromJson(std::string_view s) {
  json j = json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return MakeError(Code::kInternal, "agent sent a malformed exit frame");
  ExitInfo e;
  try {
    e.exit_code = j.at("exit_code").get<int>();
    e.signal = j.value("signal", 0);
    e.timed_out = j.value("timed_out", false);
    e.stdout_truncated = j.value("stdout_truncated", false);
    e.stderr_truncated = j.value("stderr_truncated", false);
    e.execute_us = j.value("execute_us", int64_t{0});
  } catch (const std::exception& ex) {
    return MakeError(Code::kInternal, std::string("agent sent a bad exit frame: ") + ex.what());
  }
  return e;
}

int64_t MonoMs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

const char* const kAgentFeatures[] = {"exec",  "tty",  "files", "archive",   "ports",    "warm",
                                     "procs", "sync", "renew", "grow_disk", "self_env", nullptr};

AgentInfo ThisAgent() {
  AgentInfo a;
  a.version = kProtocolVersion;
  a.agent = "sbx-agent " SBX_VERSION;
  for (const char* const* f = kAgentFeatures; *f != nullptr; ++f) a.features.emplace_back(*f);
  return a;
}

bool AgentInfo::Has(std::string_view feature) const {
  return std::find(features.begin(), features.end(), feature) != features.end();
}

std::string AgentInfo::ToJson() const {
  return json{{"version", version}, {"agent", agent}, {"features", features}}.dump();
}

Result<AgentInfo> AgentInfo::FromJson(std::string_view s) {
  json j = json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return MakeError(Code::kInternal, "agent sent a malformed pong");
  AgentInfo a;
  try {
    a.version = j.at("version").get<uint32_t>();
    a.agent = j.value("agent", std::string());
    if (j.contains("features")) a.features = j.at("features").get<std::vector<std::string>>();
  } catch (const std::exception& ex) {
    return MakeError(Code::kInternal, std::string("agent sent a bad pong: ") + ex.what());
  }
  return a;
}

// One request frame, one answer frame of type `want`, on a fresh connection.
static Result<std::string> RoundTrip(const Dialer& a, FrameType req, FrameType want, int timeout_ms,
                                     const std::string& payload = "") {
  const int64_t deadline = MonoMs() + timeout_ms;
  UniqueFd fd;
  for (int wait_us = 1000;; wait_us = std::min(wait_us * 2, 50000)) {
    SBX_ASSIGN_OR_RETURN(std::optional<UniqueFd> dialed, a.TryDial());
    if (dialed) {
      fd = std::move(*dialed);
      break;
    }
    if (MonoMs() >= deadline)
      return MakeError(Code::kDeadlineExceeded, "the sandbox's agent takes no connection (its listen queue is full)");
    ::usleep(wait_us);
  }
  std::string frame = EncodeFrame(req, payload);
  if (::send(fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(frame.size()))
    return ErrnoError("send to agent");
  FrameDecoder dec;
  char buf[4096];
  while (true) {
    struct pollfd p = {fd.get(), POLLIN, 0};
    int64_t left = deadline - MonoMs();
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0)
      return MakeError(Code::kDeadlineExceeded, "the sandbox's agent did not answer in time");
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) return MakeError(Code::kUnavailable, "agent closed the connection");
    dec.Feed(buf, n);
    auto f = dec.Next();
    if (!f.ok()) return f.error();
    if (f->has_value()) {
      if ((*f)->type == FrameType::kError) return ErrorOfFrame((*f)->payload);
      if ((*f)->type != want) return MakeError(Code::kInternal, "agent answered with an unexpected frame");
      return (*f)->payload;
    }
  }
}

Status SyncBlocking(const Dialer& a, int timeout_ms, SyncMode mode) {
  const char* payload = mode == SyncMode::kFreeze ? R"({"freeze":true})" : mode == SyncMode::kThaw ? R"({"thaw":true})" : "";
  auto r = RoundTrip(a, FrameType::kSync, FrameType::kSyncDone, timeout_ms, payload);
  if (!r.ok()) return r.error();
  return OkStatus();
}

Status RenewBlocking(const Dialer& a, int timeout_ms, const Renewal& r) {
  nlohmann::json renew = {{"time_ns", r.time_ns}, {"entropy", Base64Encode(r.entropy)}};
  if (!r.hostname.empty()) renew["hostname"] = r.hostname;
  if (!r.net.empty()) renew["net"] = nlohmann::json::parse(r.net, nullptr, false);
  auto done = RoundTrip(a, FrameType::kSync, FrameType::kSyncDone, timeout_ms, nlohmann::json{{"renew", renew}}.dump());
  if (!done.ok()) return done.error();
  return OkStatus();
}

Status SelfEnvBlocking(const Dialer& a, int timeout_ms, const std::string& content) {
  auto done = RoundTrip(a, FrameType::kSync, FrameType::kSyncDone, timeout_ms,
                        nlohmann::json{{"self_env", content}}.dump());
  if (!done.ok()) return done.error();
  return OkStatus();
}

Status GrowDiskBlocking(const Dialer& a, int timeout_ms, uint64_t bytes) {
  auto done = RoundTrip(a, FrameType::kSync, FrameType::kSyncDone, timeout_ms, nlohmann::json{{"grow_disk", bytes}}.dump());
  if (!done.ok()) return done.error();
  return OkStatus();
}

Status WarmBlocking(const Dialer& a, int timeout_ms) {
  auto r = RoundTrip(a, FrameType::kWarm, FrameType::kWarmDone, timeout_ms);
  if (!r.ok()) return r.error();
  return OkStatus();
}

Result<AgentInfo> PingBlocking(const Dialer& a, int timeout_ms) {
  SBX_ASSIGN_OR_RETURN(std::string pong, RoundTrip(a, FrameType::kPing, FrameType::kPong, timeout_ms));
  return AgentInfo::FromJson(pong);
}

Status RequireFeature(const Dialer& a, std::string_view feature, int timeout_ms) {
  SBX_ASSIGN_OR_RETURN(AgentInfo info, PingBlocking(a, timeout_ms));
  if (info.Has(feature)) return OkStatus();
  return MakeError(Code::kFailedPrecondition,
                   "the sandbox runs an agent without '" + std::string(feature) + "' (" + info.agent +
                       "); stop and start the sandbox to get the current agent");
}

}  // namespace sbx::agent
