#include "agent/channel_mux.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

namespace sbx::agent {
namespace {

constexpr size_t kHeader = 8;
constexpr uint32_t kMaxChunk = 64 * 1024;  // the largest payload sent or accepted
// Channels stop being read while this much waits to go out on the link.
constexpr size_t kLinkBacklog = 1 << 20;

uint32_t Le32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return u[0] | (u[1] << 8) | (u[2] << 16) | (static_cast<uint32_t>(u[3]) << 24);
}

struct Channel {
  UniqueFd fd;
  std::string out;                    // from the link, not yet written to fd
  uint32_t send_credit = kMuxWindow;  // bytes the other end will still take
  uint32_t owed = 0;                  // written to fd, not yet credited back
  bool read_eof = false;              // fd ended: kEof sent
  bool peer_eof = false;              // kEof received
  bool shut = false;                  // fd's write side shut (after peer_eof and out drained)
};

void SetNonBlocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

class Mux {
 public:
  Mux(int link, const MuxOptions& o) : link_(link), o_(o) {}

  Status Run() {
    SetNonBlocking(link_);
    if (o_.listen_fd >= 0) {
      SetNonBlocking(o_.listen_fd);
      Send(MuxFrame::kReset, 0, "");
    }
    std::vector<pollfd> p;
    std::vector<uint32_t> ids;
    while (true) {
      p.clear();
      ids.clear();
      // A port with no host end reads as hung up at once: while so, it is tried every 100 ms.
      p.push_back({link_gone_ ? -1 : link_, static_cast<short>(POLLIN | (link_out_.empty() ? 0 : POLLOUT)), 0});
      if (o_.listen_fd >= 0) p.push_back({o_.listen_fd, POLLIN, 0});
      const size_t first = p.size();
      for (auto& [id, c] : chans_) {
        short ev = 0;
        if (!c.read_eof && c.send_credit > 0 && link_out_.size() < kLinkBacklog) ev |= POLLIN;
        if (!c.out.empty()) ev |= POLLOUT;
        p.push_back({c.fd.get(), ev, 0});
        ids.push_back(id);
      }
      int rc = ::poll(p.data(), p.size(), link_gone_ ? 100 : -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("poll");
      }
      if (p[0].revents & POLLOUT) SBX_RETURN_IF_ERROR(FlushLink());
      if (p[0].revents & (POLLIN | POLLHUP | POLLERR) || link_gone_) {
        auto st = ReadLink();
        if (!st.ok()) return st.error();
        if (done_) return OkStatus();
      }
      if (o_.listen_fd >= 0 && (p[1].revents & POLLIN)) Accept();
      for (size_t i = first; i < p.size(); ++i) {
        if (!p[i].revents) continue;
        auto it = chans_.find(ids[i - first]);
        if (it == chans_.end() || it->second.fd.get() != p[i].fd) continue;
        Service(it, p[i].revents);
      }
      if (!link_out_.empty()) SBX_RETURN_IF_ERROR(FlushLink());
    }
  }

 private:
  void Send(MuxFrame t, uint32_t ch, std::string_view payload) {
    link_out_ += MuxHeader(t, ch, static_cast<uint32_t>(payload.size()));
    link_out_.append(payload);
  }
  void SendCredit(uint32_t ch, uint32_t n) {
    char b[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                 static_cast<char>(n >> 24)};
    Send(MuxFrame::kCredit, ch, std::string_view(b, 4));
  }

  Status FlushLink() {
    while (!link_out_.empty()) {
      ssize_t n = ::write(link_, link_out_.data(), link_out_.size());
      if (n > 0) {
        link_out_.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return OkStatus();
      // No other end now: what was for it is for nobody.
      if (o_.wait_for_peer) {
        link_out_.clear();
        return OkStatus();
      }
      return ErrnoError("write to the link");
    }
    return OkStatus();
  }

  Status ReadLink() {
    char buf[64 * 1024];
    while (true) {
      ssize_t n = ::read(link_, buf, sizeof buf);
      if (n > 0) {
        link_gone_ = false;
        in_.append(buf, static_cast<size_t>(n));
        SBX_RETURN_IF_ERROR(Parse());
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return OkStatus();
      // End of file (or an error): the other end went.
      if (!o_.wait_for_peer) {
        done_ = true;
        return OkStatus();
      }
      if (!link_gone_) {
        link_gone_ = true;
        DropAll();
      }
      return OkStatus();
    }
  }

  void DropAll() {
    chans_.clear();
    in_.clear();
    link_out_.clear();
  }

  Status Parse() {
    size_t at = 0;
    while (in_.size() - at >= kHeader) {
      const char* h = in_.data() + at;
      uint32_t len = Le32(h);
      auto type = static_cast<MuxFrame>(static_cast<unsigned char>(h[4]));
      uint32_t ch = static_cast<unsigned char>(h[5]) | (static_cast<unsigned char>(h[6]) << 8) |
                    (static_cast<uint32_t>(static_cast<unsigned char>(h[7])) << 16);
      if (len > kMaxChunk) return MakeError(Code::kInternal, "a frame on the link is too long");
      if (in_.size() - at - kHeader < len) break;
      Dispatch(type, ch, std::string_view(h + kHeader, len));
      at += kHeader + len;
    }
    in_.erase(0, at);
    return OkStatus();
  }

  void Drop(uint32_t ch, bool tell) {
    chans_.erase(ch);
    if (tell) Send(MuxFrame::kClose, ch, "");
  }

  void Dispatch(MuxFrame t, uint32_t ch, std::string_view payload) {
    const bool host = o_.listen_fd >= 0;
    if (t == MuxFrame::kReset) {
      if (!host) chans_.clear();
      return;
    }
    if (t == MuxFrame::kOpen) {
      if (host || !o_.connect) return;  // only the host opens channels
      chans_.erase(ch);
      UniqueFd fd = o_.connect();
      if (!fd.valid()) {
        Send(MuxFrame::kClose, ch, "");
        return;
      }
      SetNonBlocking(fd.get());
      chans_[ch].fd = std::move(fd);
      return;
    }
    auto it = chans_.find(ch);
    if (it == chans_.end()) return;  // closed here already: the kClose is on its way
    Channel& c = it->second;
    switch (t) {
      case MuxFrame::kData:
        // More than the window: the other end broke the protocol on this channel.
        if (c.peer_eof || c.out.size() + payload.size() > kMuxWindow) return Drop(ch, true);
        c.out.append(payload);
        WriteOut(it);
        return;
      case MuxFrame::kEof:
        c.peer_eof = true;
        WriteOut(it);
        return;
      case MuxFrame::kClose:
        return Drop(ch, false);
      case MuxFrame::kCredit:
        if (payload.size() == 4) {
          uint64_t credit = uint64_t{c.send_credit} + Le32(payload.data());
          c.send_credit = credit > kMuxWindow ? kMuxWindow : static_cast<uint32_t>(credit);
        }
        return;
      default:
        return;
    }
  }

  // Writes what the channel holds for its socket; shuts its write side after the other
  // end's kEof; drops the channel once both directions ended.
  void WriteOut(std::map<uint32_t, Channel>::iterator it) {
    const uint32_t ch = it->first;
    Channel& c = it->second;
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        c.owed += static_cast<uint32_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      return Drop(ch, true);  // the local end went
    }
    if (c.owed > 0 && (c.out.empty() || c.owed >= kMuxWindow / 4)) {
      SendCredit(ch, c.owed);
      c.owed = 0;
    }
    if (c.out.empty() && c.peer_eof && !c.shut) {
      (void)::shutdown(c.fd.get(), SHUT_WR);
      c.shut = true;
    }
    if (c.shut && c.read_eof) chans_.erase(it);
  }

  void ReadIn(std::map<uint32_t, Channel>::iterator it) {
    const uint32_t ch = it->first;
    Channel& c = it->second;
    char buf[kMaxChunk];
    size_t want = c.send_credit < sizeof buf ? c.send_credit : sizeof buf;
    if (want == 0) return;
    ssize_t n = ::read(c.fd.get(), buf, want);
    if (n > 0) {
      Send(MuxFrame::kData, ch, std::string_view(buf, static_cast<size_t>(n)));
      c.send_credit -= static_cast<uint32_t>(n);
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n < 0) return Drop(ch, true);
    c.read_eof = true;
    Send(MuxFrame::kEof, ch, "");
    if (c.shut) chans_.erase(it);
  }

  void Service(std::map<uint32_t, Channel>::iterator it, short revents) {
    if (revents & POLLOUT) {
      const uint32_t id = it->first;
      WriteOut(it);
      it = chans_.find(id);
      if (it == chans_.end()) return;
    }
    if (revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!it->second.read_eof && it->second.send_credit > 0) {
        ReadIn(it);
      } else if (revents & POLLERR) {
        Drop(it->first, true);
      }
    }
  }

  void Accept() {
    while (true) {
      int fd = ::accept4(o_.listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      if (link_gone_) {
        ::close(fd);
        continue;
      }
      uint32_t id = next_;
      for (uint32_t tries = 0; chans_.count(id) && tries < kMuxMaxChannel; ++tries) id = id % kMuxMaxChannel + 1;
      if (chans_.count(id)) {
        ::close(fd);
        continue;
      }
      next_ = id % kMuxMaxChannel + 1;
      chans_[id].fd = UniqueFd(fd);
      Send(MuxFrame::kOpen, id, "");
    }
  }

  int link_;
  const MuxOptions& o_;
  std::map<uint32_t, Channel> chans_;
  std::string in_, link_out_;
  uint32_t next_ = 1;
  bool link_gone_ = false;
  bool done_ = false;
};

}  // namespace

std::string MuxHeader(MuxFrame type, uint32_t channel, uint32_t length) {
  std::string h(kHeader, '\0');
  for (int i = 0; i < 4; ++i) h[i] = static_cast<char>(length >> (8 * i));
  h[4] = static_cast<char>(type);
  for (int i = 0; i < 3; ++i) h[5 + i] = static_cast<char>(channel >> (8 * i));
  return h;
}

Status RunMux(int link, const MuxOptions& opts) { return Mux(link, opts).Run(); }

}  // namespace sbx::agent
