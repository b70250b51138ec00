// The agent wire protocol, version 1: shared by the daemon (client) and sbx-agent (server).
// It knows nothing of containers, so the same frames serve every isolation kind.
//
// A connection carries one request. Each frame is an 8-byte header, then the payload:
//   u32 little-endian payload length (at most kMaxPayload), u8 type, 3 zero bytes.
// Requests: kExec (JSON ExecRequest) then any number of kStdin / kStdinEof / kSignal;
// or kSync (the agent calls sync(2); with {"freeze": true} it also freezes its own disk's
// file system, with {"thaw": true} it thaws it; answered by kSyncDone with "{}", or kError);
// or kPing (answered by kPong with JSON AgentInfo {"version", "agent", "features"}); or kWarm (the agent walks
// its root filesystem so lookups are cached, answered by kWarmDone with JSON {"entries"}).
// kExec may be followed by kStdin / kStdinEof / kSignal / kResize frames.
// Answers to kExec: with report_pid, first a kResult {"pid"} once the command started;
// kStdout / kStderr (raw bytes) in order, then one kExit (JSON ExitInfo),
// or one kError (JSON {"message", "code"}) if the request itself was refused.
// Or kFileOp (JSON {"op", "path", ...}; see agent/files.h): answered by kResult (JSON) or
// kError; a read streams kData frames then kDataEnd after its kResult; a write or an
// archive upload, once accepted with a kResult, takes kData frames then kDataEnd and
// answers a final kResult.
// Or kPortOpen (JSON {"port"}): the agent dials that TCP port on the sandbox's own
// loopback and answers kResult; from then on the connection carries raw bytes both ways.
// Or a background process that the agent keeps (agent/process_keeper.h):
// kProcStart (JSON {"exec": ExecRequest, "ring_bytes"}) answers kResult {"pid", "from": 0}
// (a command that cannot start: kStderr then kExit, as an exec); kProcAttach (JSON {"pid",
// "since"}) answers kResult (what the keeper knows, and "from"); after either, each kStdout /
// kStderr frame is one chunk of the ring, numbered from "from" up, and kExit (JSON ExitInfo)
// follows the end; sbxd may send kStdin / kStdinEof / kSignal / kResize, and kProcRelease
// once it holds the exit (the keeper then goes). kProcList answers kResult {"processes"}.
// Any thread may use these functions; they hold no state.
#pragma once


#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::agent {

constexpr uint32_t kProtocolVersion = 1;
// An exec request that names a `user` says version 2: an agent that knows only version 1
// refuses it instead of running the command as root.
constexpr uint32_t kUserProtocolVersion = 2;
constexpr uint32_t kHeaderSize = 8;
constexpr uint32_t kMaxPayload = 1 << 20;
// An upload is written to a hidden file of this prefix beside its target, renamed over it
// once whole (files.h): a watch of the folder sees that name come and go.
constexpr const char* kUploadPrefix = ".sbx-upload-";

enum class FrameType : uint8_t {
  kExec = 1,
  kStdin = 2,
  kStdinEof = 3,
  kStdout = 4,
  kStderr = 5,
  kExit = 6,
  kError = 7,
  kSignal = 8,
  kPing = 9,
  kPong = 10,
  kKeepalive = 11,
  kWarm = 12,
  kWarmDone = 13,
  kFileOp = 14,
  kData = 15,
  kDataEnd = 16,
  kResult = 17,
  kPortOpen = 18,
  kResize = 19,
  kProcStart = 20,
  kProcAttach = 21,
  kProcList = 22,
  kProcRelease = 23,
  kSync = 24,
  kSyncDone = 25,
};
constexpr FrameType kLastFrameType = FrameType::kSyncDone;

// The error a kError frame carries: its "message", and its "code" (CodeOfName), or
// `if_none` for a frame that names none (a command's spawn failure).
Error ErrorOfFrame(const std::string& payload, Code if_none = Code::kInternal);

struct Frame {
  FrameType type;
  std::string payload;
};

std::string EncodeHeader(FrameType type, uint32_t len);
std::string EncodeFrame(FrameType type, std::string_view payload);
// Parses a header; fails on an unknown type or an oversized length.
Result<std::pair<FrameType, uint32_t>> DecodeHeader(const unsigned char* h);

// Accumulates bytes and yields whole frames.
class FrameDecoder {
 public:
  void Feed(const char* data, size_t n) { buf_.append(data, n); }
  // A frame, nothing yet (nullopt), or an error for a malformed stream.
  Result<std::optional<Frame>> Next();
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
};

struct ExecRequest {
  uint32_t version = kProtocolVersion;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "KEY=VALUE"
  std::string cwd;               // empty: "/"
  int64_t timeout_ms = 0;        // 0: none
  uint64_t stdout_cap = 16 << 20;
  uint64_t stderr_cap = 16 << 20;
  bool stdin_open = false;  // false: stdin is /dev/null
  int64_t keepalive_ms = 15000;  // a kKeepalive frame after this long without output
  bool report_pid = false;  // a kResult {"pid"} frame first, once the command started
  // A pseudo-terminal: the command's stdin, stdout and stderr are its slave (and it is the
  // controlling terminal of the command's session); its output comes as kStdout. kResize
  // {"cols","rows"} frames change its size.
  bool tty = false;
  int cols = 80, rows = 24;
  // Who runs the command: empty for root, else a name from the sandbox's /etc/passwd or a
  // numeric uid. Its uid, gid and supplementary groups, no capabilities; HOME, USER and
  // LOGNAME are set from /etc/passwd where `env` lacks them, and an empty cwd is its home.
  std::string user;
  // The content of the sandbox's /run/sbx.env (self_env.h), written before the command
  // starts where it differs; empty: left as it is.
  std::string self_env;
  std::string ToJson() const;
  static Result<ExecRequest> FromJson(std::string_view s);
};

struct ExitInfo {
  int exit_code = 0;
  int signal = 0;  // the signal that killed the command, 0 if none
  bool timed_out = false;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t execute_us = 0;  // command start to its end
  std::string ToJson() const;
  static Result<ExitInfo> FromJson(std::string_view s);
};

// A way to reach one agent. The runtime that started the sandbox makes it; how it connects
// (a unix socket in the sandbox's network namespace, a vsock port, a path) is that
// runtime's business. Any thread.
class Dialer {
 public:
  virtual ~Dialer() = default;
  // One connection attempt, without blocking: a connected stream socket (nonblocking,
  // close-on-exec); std::nullopt when the agent takes no connection now (its listen queue
  // is full: try again later); or the error.
  virtual Result<std::optional<UniqueFd>> TryDial() const = 0;
};
using DialerPtr = std::shared_ptr<const Dialer>;

// What an agent says of itself in its kPong. The protocol grows compatibly (new frames
// and operations, old ones keep their meaning), and a hibernated sandbox keeps the agent
// it started with, so sbxd may meet an agent older than itself: before a request that
// needs a later feature, sbxd asks (PingBlocking) and answers 409 when it is missing.
struct AgentInfo {
  uint32_t version = 0;
  std::string agent;                  // "sbx-agent <version>"
  std::vector<std::string> features;  // names as in kAgentFeatures of the agent's build
  bool Has(std::string_view feature) const;
  std::string ToJson() const;
  // A pong without "features" (an agent from before the list) has none.
  static Result<AgentInfo> FromJson(std::string_view s);
};
// This build's features: "exec" (kExec), "tty" (kExec with tty, kResize), "files"
// (kFileOp), "archive" (the tar operations of kFileOp), "ports" (kPortOpen), "warm"
// (kWarm), "procs" (kProcStart, kProcAttach, kProcList, kProcRelease), "sync" (kSync),
// "renew" (kSync's renew), "grow_disk" (kSync's grow_disk), "self_env" (kSync's self_env,
// ExecRequest's self_env).
// Append; never rename
// or reuse a name.
extern const char* const kAgentFeatures[];
// The AgentInfo this build's agent answers with.
AgentInfo ThisAgent();

// How long sbxd waits for an agent to take a connection. Code in a sandbox can fill its
// agent's listen queue (or stop the agent's handlers): every dial gives up at a deadline.
constexpr int kAgentDialMs = 5000;
// How long a file or port request waits for the agent to take a frame or give its first
// answer (a stopped handler would otherwise hold the request forever).
constexpr int kAgentStallMs = 30000;
// A blocking round trip to check that the agent at `a` answers (any thread), and what it
// has; connecting and answering together take at most `timeout_ms`.
Result<AgentInfo> PingBlocking(const Dialer& a, int timeout_ms);
// OK when the agent at `a` has `feature`; kFailedPrecondition (409 conflict) naming it when the agent is older.
Status RequireFeature(const Dialer& a, std::string_view feature, int timeout_ms);
// Asks the agent to walk its root filesystem (warming the lookup caches); blocking.
Status WarmBlocking(const Dialer& a, int timeout_ms);
// Asks the agent to write every file system's dirty data to its disks (sync(2)), and
// waits for it: a VM's files are whole on its disk before the VM is ended. kFreeze also
// freezes the file system of the sandbox's own disk (a microVM's: its journal flushed, the
// disk's image whole and clean until kThaw; writers inside wait meanwhile).
enum class SyncMode { kSync, kFreeze, kThaw };
Status SyncBlocking(const Dialer& a, int timeout_ms, SyncMode mode = SyncMode::kSync);
// A VM restored from saved memory (a hibernated one, or a copy of a memory template)
// starts where it was saved: its clock stood still and its kernel's random state is the
// saved one's. The agent ("renew") sets the clock to `time_ns` (the host's, Unix
// nanoseconds), mixes `entropy` (32 to 512 bytes) into its kernel's pool and reseeds its
// generator, and sets `hostname` where it is not empty (kSync with {"renew": {...}}).
// A copy of a template with a network takes its own addresses: `net` (a JSON object with
// "address", "gateway", "prefix", "address6", "gateway6", "mac", as agent::VmConfig has
// them) readdresses eth0 (and gives it that MAC) where it is not empty.
// Milliseconds on CLOCK_MONOTONIC (deadlines and intervals).
int64_t MonoMs();

struct Renewal {
  int64_t time_ns = 0;
  std::string entropy;
  std::string hostname;
  std::string net;
};
Status RenewBlocking(const Dialer& a, int timeout_ms, const Renewal& r);
// The sandbox's file of its id and live token (self_env.h), $SBX_ENV_FILE in every command.
inline constexpr const char* kSelfEnvPath = "/run/sbx.env";
// Writes `content` to the sandbox's kSelfEnvPath (self_env.h): kSync {"self_env": "..."}.
// An agent from before "self_env" takes it for a plain sync.
Status SelfEnvBlocking(const Dialer& a, int timeout_ms, const std::string& content);
// A VM's own disk grew to `bytes` (QEMU's block_resize): its file system follows.
Status GrowDiskBlocking(const Dialer& a, int timeout_ms, uint64_t bytes);

}  // namespace sbx::agent
