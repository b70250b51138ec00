#include "agent/client.h"

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>


namespace sbx::agent {

namespace asio = boost::asio;
using asio::use_awaitable;
using boost::system::error_code;

namespace {

// Connects `sock` to the agent that `a` reaches, retrying while its listen queue is full,
// until the deadline.
asio::awaitable<Status> Connect(asio::local::stream_protocol::socket& sock, DialerPtr a) {
  if (!a) co_return MakeError(Code::kUnavailable, "the sandbox has no agent to reach");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAgentDialMs);
  asio::steady_timer wait(sock.get_executor());
  UniqueFd fd;
  for (int wait_us = 1000;; wait_us = std::min(wait_us * 2, 50000)) {
    auto dialed = a->TryDial();
    if (!dialed.ok()) co_return MakeError(Code::kUnavailable, "cannot reach the sandbox's agent: " + dialed.error().message);
    if (*dialed) {
      fd = std::move(**dialed);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      co_return MakeError(Code::kUnavailable, "the sandbox's agent takes no connection (its listen queue is full); try again");
    wait.expires_after(std::chrono::microseconds(wait_us));
    error_code ignored;
    co_await wait.async_wait(asio::redirect_error(use_awaitable, ignored));
  }
  error_code ec;
  sock.assign(asio::local::stream_protocol(), fd.Release(), ec);
  if (ec) co_return MakeError(Code::kInternal, "cannot reach the sandbox's agent: " + ec.message());
  co_return OkStatus();
}

}  // namespace

asio::awaitable<Result<ExitInfo>> Exec(asio::any_io_executor ex, DialerPtr addr,
                                       ExecRequest req, std::string stdin_data,
                                       OutputFn on_output, int64_t grace_ms,
                                       std::shared_ptr<CancelSignal> client_gone) {
  auto sock = std::make_shared<asio::local::stream_protocol::socket>(ex);
  error_code ec;
  Status connected = co_await Connect(*sock, std::move(addr));
  if (!connected.ok()) co_return connected.error();
  if (client_gone) {
    // The client went away: the agent sees the connection close and kills the tree.
    std::weak_ptr<asio::local::stream_protocol::socket> weak = sock;
    client_gone->OnFire([weak, ex] {
      asio::post(ex, [weak] {
        if (auto s = weak.lock()) {
          error_code ignored;
          s->close(ignored);
        }
      });
    });
  }

  // The watchdog closes the connection if the agent does not answer in time.
  auto timer = std::make_shared<asio::steady_timer>(ex);
  if (req.timeout_ms > 0) {
    timer->expires_after(std::chrono::milliseconds(req.timeout_ms + grace_ms));
    timer->async_wait([sock](const error_code& e) {
      if (!e) {
        error_code ignored;
        sock->close(ignored);
      }
    });
  }
  struct Cancel {
    std::shared_ptr<asio::steady_timer> t;
    ~Cancel() {
      error_code ignored;
      t->cancel(ignored);  // the non-throwing form: a destructor
    }
  } cancel{timer};

  std::string out = EncodeFrame(FrameType::kExec, req.ToJson());
  if (req.stdin_open) {
    size_t off = 0;
    while (off < stdin_data.size()) {
      size_t n = std::min<size_t>(kMaxPayload, stdin_data.size() - off);
      out += EncodeFrame(FrameType::kStdin, std::string_view(stdin_data).substr(off, n));
      off += n;
    }
    out += EncodeFrame(FrameType::kStdinEof, "");
  }
  co_await asio::async_write(*sock, asio::buffer(out), asio::redirect_error(use_awaitable, ec));
  if (ec) co_return MakeError(Code::kUnavailable, "sending to the sandbox's agent: " + ec.message());

  unsigned char header[kHeaderSize];
  std::string payload;
  while (true) {
    co_await asio::async_read(*sock, asio::buffer(header),
                              asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (client_gone && client_gone->fired())
        co_return MakeError(Code::kUnavailable, "the client went away: the command was stopped");
      if (!sock->is_open())
        co_return MakeError(Code::kDeadlineExceeded, "the sandbox's agent did not answer in time");
      co_return MakeError(Code::kUnavailable,
                          "the sandbox's agent closed the connection: " + ec.message());
    }
    auto h = DecodeHeader(header);
    if (!h.ok()) co_return h.error().Wrap("reading from the sandbox's agent");
    auto [type, len] = *h;
    payload.resize(len);
    if (len > 0) {
      co_await asio::async_read(*sock, asio::buffer(payload),
                                asio::redirect_error(use_awaitable, ec));
      if (ec) co_return MakeError(Code::kUnavailable, "reading from the sandbox's agent: " + ec.message());
    }
    switch (type) {
      case FrameType::kStdout:
      case FrameType::kStderr:
        co_await on_output(type, payload);
        break;
      case FrameType::kExit:
        co_return ExitInfo::FromJson(payload);
      case FrameType::kError:
        co_return ErrorOfFrame(payload, Code::kInvalidArgument).Wrap("the sandbox's agent refused the command");
      case FrameType::kKeepalive:
        co_await on_output(type, payload);
        break;
      default:
        co_return MakeError(Code::kInternal, "unexpected frame from the sandbox's agent");
    }
  }
}

// A deadline on the connection's pending operations: when it passes, they are cancelled.
// The timer's handler holds only this state (shared), never the Conn.
struct Conn::Deadline {
  explicit Deadline(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  asio::local::stream_protocol::socket* sock = nullptr;  // null once the Conn is gone
  uint64_t gen = 0;
  bool fired = false;

  static void Arm(const std::shared_ptr<Deadline>& d, int64_t ms) {
    d->fired = false;
    uint64_t gen = ++d->gen;
    d->timer.expires_after(std::chrono::milliseconds(ms));
    d->timer.async_wait([d, gen](const error_code& ec) {
      if (ec || gen != d->gen || !d->sock) return;
      d->fired = true;
      error_code ignored;
      d->sock->cancel(ignored);
    });
  }
  void Disarm() {
    ++gen;
    error_code ignored;
    timer.cancel(ignored);  // the non-throwing form: ~Conn calls it
  }
};

Conn::Conn(asio::any_io_executor ex) : sock_(ex), deadline_(std::make_shared<Deadline>(ex)) {
  deadline_->sock = &sock_;
}

Conn::~Conn() {
  deadline_->sock = nullptr;
  deadline_->Disarm();
}

asio::awaitable<Status> Conn::Open(DialerPtr addr) { co_return co_await Connect(sock_, std::move(addr)); }

asio::awaitable<Status> Conn::Send(FrameType type, std::string payload) {
  std::string header = EncodeHeader(type, static_cast<uint32_t>(payload.size()));
  std::array<asio::const_buffer, 2> bufs = {asio::buffer(header), asio::buffer(payload)};
  error_code ec;
  Deadline::Arm(deadline_, kAgentStallMs);
  co_await asio::async_write(sock_, bufs, asio::redirect_error(use_awaitable, ec));
  deadline_->Disarm();
  if (ec && deadline_->fired)
    co_return MakeError(Code::kUnavailable, "the sandbox's agent took nothing for " +
                                                std::to_string(kAgentStallMs / 1000) + " s");
  if (ec) co_return MakeError(Code::kUnavailable, "sending to the sandbox's agent: " + ec.message());
  co_return OkStatus();
}

asio::awaitable<Result<Frame>> Conn::Recv(int64_t timeout_ms) {
  unsigned char header[kHeaderSize];
  error_code ec;
  if (timeout_ms > 0) Deadline::Arm(deadline_, timeout_ms);
  co_await asio::async_read(sock_, asio::buffer(header), asio::redirect_error(use_awaitable, ec));
  if (ec && deadline_->fired) {
    co_return MakeError(Code::kUnavailable, "the sandbox's agent did not answer within " +
                                                std::to_string(timeout_ms / 1000) + " s");
  }
  if (ec) co_return MakeError(Code::kUnavailable, "the sandbox's agent closed the connection: " + ec.message());
  auto h = DecodeHeader(header);
  if (!h.ok()) co_return h.error().Wrap("reading from the sandbox's agent");
  Frame f{h->first, std::string(h->second, '\0')};
  if (h->second > 0) {
    co_await asio::async_read(sock_, asio::buffer(f.payload), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      deadline_->Disarm();
      co_return MakeError(Code::kUnavailable, "reading from the sandbox's agent: " + ec.message());
    }
  }
  deadline_->Disarm();
  if (f.type == FrameType::kError) co_return ErrorOfFrame(f.payload);
  co_return f;
}

asio::awaitable<Result<std::string>> Conn::RecvResult() {
  auto f = co_await Recv(kAgentStallMs);
  if (!f.ok()) co_return f.error();
  if (f->type != FrameType::kResult) co_return MakeError(Code::kInternal, "unexpected frame from the sandbox's agent");
  co_return std::move(f->payload);
}

asio::awaitable<Result<AgentInfo>> Ping(asio::any_io_executor ex, DialerPtr addr) {
  Conn c(ex);
  if (Status st = co_await c.Open(std::move(addr)); !st.ok()) co_return st.error();
  if (Status st = co_await c.Send(FrameType::kPing, ""); !st.ok()) co_return st.error();
  auto f = co_await c.Recv(kAgentStallMs);
  if (!f.ok()) co_return f.error();
  if (f->type != FrameType::kPong) co_return MakeError(Code::kInternal, "the sandbox's agent answered a ping with another frame");
  co_return AgentInfo::FromJson(f->payload);
}

}  // namespace sbx::agent
