// The daemon's side of the agent protocol, over a unix stream socket (container and
// gVisor) with Boost.Asio coroutines. Functions are safe from any io thread; one call
// owns its connection.
#pragma once

#include <utility>  // before Boost.Asio (its awaitable.hpp needs std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "agent/protocol.h"
#include "base/cancel.h"
#include "base/result.h"

namespace sbx::agent {

// Receives each chunk of output as it arrives; awaiting it applies back-pressure all the
// way to the command's pipe.
using OutputFn = std::function<boost::asio::awaitable<void>(FrameType, std::string_view)>;

// Runs `req` in the sandbox whose agent listens at `addr`. `stdin_data` is sent and
// closed if req.stdin_open. The connection is dropped (and the command's tree killed by the
// agent) if no answer arrives `grace_ms` after req.timeout_ms, or when `client_gone` fires.
boost::asio::awaitable<Result<ExitInfo>> Exec(boost::asio::any_io_executor ex,
                                              DialerPtr addr, ExecRequest req,
                                              std::string stdin_data, OutputFn on_output,
                                              int64_t grace_ms = 10000,
                                              std::shared_ptr<CancelSignal> client_gone = nullptr);

// What the agent at `addr` says of itself (a kPing round trip within kAgentStallMs).
boost::asio::awaitable<Result<AgentInfo>> Ping(boost::asio::any_io_executor ex, DialerPtr addr);

// One connection to a sandbox's agent for a file or port request: frames both ways, then
// (ports) raw bytes through socket(). Used by one coroutine at a time.
class Conn {
 public:
  explicit Conn(boost::asio::any_io_executor ex);
  ~Conn();
  boost::asio::awaitable<Status> Open(DialerPtr addr);
  // Fails (unavailable) if the agent takes none of the frame for kAgentStallMs.
  boost::asio::awaitable<Status> Send(FrameType type, std::string payload);
  // The next frame, waited for at most `timeout_ms` (0: without a deadline, for streams
  // of output). A kError frame is returned as its error, with the agent's code.
  boost::asio::awaitable<Result<Frame>> Recv(int64_t timeout_ms = 0);
  // Recv() that insists on a kResult frame, within kAgentStallMs; returns its JSON text.
  boost::asio::awaitable<Result<std::string>> RecvResult();
  boost::asio::local::stream_protocol::socket& socket() { return sock_; }

 private:
  struct Deadline;
  boost::asio::local::stream_protocol::socket sock_;
  std::shared_ptr<Deadline> deadline_;
};

}  // namespace sbx::agent
