// The daemon's side of the agent protocol, over a unix stream socket (container and
// gVisor) with Boost.Asio coroutines. Functions are safe from any io thread; one call
// owns its connection.
#pragma once

#include <utility>  // before Boost.Asio (its awaitable.hpp needs std::exchange)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "agent/protocol.h"
#include "base/result.h"

namespace sbx::agent {

// Receives each chunk of output as it arrives; awaiting it applies back-pressure all the
// way to the command's pipe.
using OutputFn = std::function<boost::asio::awaitable<void>(FrameType, std::string_view)>;

// Runs `req` in the sandbox whose agent listens at `socket_path`. `stdin_data` is sent and
// closed if req.stdin_open. The connection is dropped (and the command's tree killed by the
// agent) if no answer arrives `grace_ms` after req.timeout_ms.
boost::asio::awaitable<Result<ExitInfo>> Exec(boost::asio::any_io_executor ex,
                                              std::string socket_path, ExecRequest req,
                                              std::string stdin_data, OutputFn on_output,
                                              int64_t grace_ms = 10000);

}  // namespace sbx::agent
