#include "runtime/microvm/qmp.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "base/proc.h"

namespace sbx::runtime::microvm {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// An answer longer than this is no answer of QEMU's (query-migrate's is a few hundred bytes).
constexpr size_t kMaxLine = 1 << 20;

}  // namespace

int MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

Result<Qmp> Qmp::Connect(const std::string& dir, const std::string& name, uid_t uid, int timeout_ms) {
  // Through a handle on the folder: its path may be longer than a socket address holds.
  UniqueFd folder(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!folder.valid()) return ErrnoError("open " + dir);
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/%s", folder.get(), name.c_str());
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  UniqueFd fd;
  for (;;) {
    fd = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoError("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    if ((errno != ENOENT && errno != ECONNREFUSED) || Clock::now() > deadline)
      return ErrnoError("connect to QEMU's monitor in " + dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The folder is QEMU's user's: a socket it does not serve (a link to another VM's) is
  // not taken.
  struct ucred cred = {};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != uid)
    return MakeError(Code::kInternal, "the monitor socket in " + dir + " is not served by the VM's QEMU");
  Qmp q(std::move(fd));
  // The greeting, then command mode.
  auto hello = q.ReadMessage(deadline);
  if (!hello.ok()) return hello.error().Wrap("QEMU's monitor");
  if (!hello->contains("QMP")) return MakeError(Code::kInternal, "QEMU's monitor did not greet");
  q.per_call_ms_ = std::max(1000, MsLeft(deadline));
  SBX_RETURN_IF_ERROR(q.Execute("qmp_capabilities"));
  q.per_call_ms_ = 30000;
  return q;
}

Status Qmp::Send(const std::string& line, int pass_fd) {
  // A command is a few hundred bytes: one send takes it whole, or fails.
  ssize_t n;
  do n = proc::SendWithFd(fd_.get(), line, pass_fd);
  while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError("write to QEMU's monitor");
  if (static_cast<size_t>(n) != line.size()) return MakeError(Code::kInternal, "a short write to QEMU's monitor");
  return OkStatus();
}

Result<json> Qmp::ReadMessage(Clock::time_point deadline) {
  for (;;) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      auto j = json::parse(line, nullptr, false);
      if (!j.is_object()) return MakeError(Code::kInternal, "QEMU's monitor said something that is not a message");
      return j;
    }
    if (buf_.size() > kMaxLine) return MakeError(Code::kInternal, "QEMU's monitor sent an overlong line");
    struct pollfd p = {fd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, MsLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("poll QEMU's monitor");
    if (r == 0) return MakeError(Code::kDeadlineExceeded, "QEMU's monitor did not answer in time");
    char chunk[8192];
    ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read QEMU's monitor");
    if (n == 0) return MakeError(Code::kInternal, "QEMU closed its monitor (it ended)");
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

Result<json> Qmp::Execute(const std::string& command, const json& args, int pass_fd) {
  json cmd = {{"execute", command}};
  if (!args.is_null()) cmd["arguments"] = args;
  SBX_RETURN_IF_ERROR(Send(cmd.dump() + "\n", pass_fd));
  const auto deadline = Clock::now() + std::chrono::milliseconds(per_call_ms_);
  for (;;) {
    SBX_ASSIGN_OR_RETURN(json m, ReadMessage(deadline));
    if (m.contains("event")) continue;  // asynchronous news, not the answer
    if (m.contains("error")) {
      const json& e = m["error"];
      std::string desc = e.is_object() && e.contains("desc") && e["desc"].is_string() ? e["desc"].get<std::string>()
                                                                                     : "no reason given";
      return MakeError(Code::kInternal, "QEMU refused " + command + ": " + desc.substr(0, 500));
    }
    if (m.contains("return")) return m["return"];
    return MakeError(Code::kInternal, "QEMU's monitor answered " + command + " with neither a return nor an error");
  }
}

Result<std::string> Qmp::RunState() {
  SBX_ASSIGN_OR_RETURN(json r, Execute("query-status"));
  if (!r.is_object() || !r.contains("status") || !r["status"].is_string())
    return MakeError(Code::kInternal, "QEMU's query-status has no status");
  return r["status"].get<std::string>();
}

Status Qmp::WaitMigration(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    SBX_ASSIGN_OR_RETURN(json r, Execute("query-migrate"));
    std::string st = r.is_object() && r.contains("status") && r["status"].is_string() ? r["status"].get<std::string>() : "";
    if (st == "completed") return OkStatus();
    if (st == "failed" || st == "cancelled") {
      std::string why = r.contains("error-desc") && r["error-desc"].is_string() ? r["error-desc"].get<std::string>() : st;
      return MakeError(Code::kInternal, "QEMU's memory save " + st + ": " + why.substr(0, 500));
    }
    if (Clock::now() > deadline)
      return MakeError(Code::kDeadlineExceeded, "QEMU's memory save did not end within " + std::to_string(timeout_ms / 1000) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace sbx::runtime::microvm
