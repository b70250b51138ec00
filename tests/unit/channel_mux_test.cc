// The microVM wall's channel mux (agent/channel_mux.h): many connections over one link,
// each with its own flow control, between a host end and a guest end in this process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "agent/channel_mux.h"

namespace sbx::agent {
namespace {

// Reads everything until end of file.
std::string ReadAll(int fd) {
  std::string s;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

void WriteAll(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    ssize_t n = ::write(fd, s.data() + at, s.size() - at);
    ASSERT_GT(n, 0);
    at += static_cast<size_t>(n);
  }
}

// A host end listening on an abstract socket and a guest end whose channels each reach an
// echo thread, over a socket pair as the link.
class MuxPair {
 public:
  MuxPair() {
    ::signal(SIGPIPE, SIG_IGN);  // as in the relay and the guest's mux: a gone peer is an error, not a signal
    int sp[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    host_link_ = sp[0];
    guest_link_ = sp[1];
    listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    name_ = "sbx-mux-test-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    sockaddr_un a = Addr();
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), Len()), 0);
    EXPECT_EQ(::listen(listen_, 16), 0);
    host_opts_.listen_fd = listen_;
    guest_opts_.connect = [] {
      int p[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return UniqueFd();
      std::thread([fd = p[1]] {
        char buf[65536];
        ssize_t n;
        // Echoes until either side ends (at the end of a test the mux drops its channels).
        while ((n = ::read(fd, buf, sizeof buf)) > 0) {
          for (ssize_t at = 0, w; at < n; at += w)
            if ((w = ::write(fd, buf + at, static_cast<size_t>(n - at))) <= 0) n = -1;
          if (n < 0) break;
        }
        ::close(fd);
      }).detach();
      return UniqueFd(p[0]);
    };
    host_ = std::thread([this] { host_status_ = RunMux(host_link_, host_opts_); });
    guest_ = std::thread([this] { guest_status_ = RunMux(guest_link_, guest_opts_); });
  }
  ~MuxPair() {
    ::shutdown(host_link_, SHUT_RDWR);
    host_.join();
    guest_.join();
    ::close(host_link_);
    ::close(guest_link_);
    ::close(listen_);
  }
  UniqueFd Dial() {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a = Addr();
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), Len()), 0);
    return fd;
  }
  Status host_status_ = OkStatus(), guest_status_ = OkStatus();

 private:
  sockaddr_un Addr() const {
    sockaddr_un a = {};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name_.data(), name_.size());
    return a;
  }
  socklen_t Len() const { return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name_.size()); }
  int host_link_ = -1, guest_link_ = -1, listen_ = -1;
  std::string name_;
  MuxOptions host_opts_, guest_opts_;
  std::thread host_, guest_;
};

std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 251);
  return s;
}

TEST(ChannelMux, ConnectionsCarryTheirBytesBothWaysWithHalfClose) {
  MuxPair m;
  const std::string big = Pattern(3 << 20, 'a'), small = Pattern(1000, 'z');
  UniqueFd a = m.Dial(), b = m.Dial();
  std::string got_a;
  std::thread reader([&] { got_a = ReadAll(a.get()); });
  WriteAll(b.get(), small);
  ::shutdown(b.get(), SHUT_WR);
  WriteAll(a.get(), big);
  ::shutdown(a.get(), SHUT_WR);
  EXPECT_EQ(ReadAll(b.get()), small);
  reader.join();
  EXPECT_EQ(got_a.size(), big.size());
  EXPECT_TRUE(got_a == big);
}

TEST(ChannelMux, AStalledConnectionDoesNotHoldUpAnother) {
  MuxPair m;
  // `stalled` sends far more than the windows and socket buffers hold, and never reads:
  // its echo backs up to the guest and stops there.
  UniqueFd stalled = m.Dial();
  std::thread writer([&] {
    const std::string chunk = Pattern(1 << 20, 's');
    for (int i = 0; i < 8; ++i)
      if (::send(stalled.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;
  });
  ::usleep(200 * 1000);
  UniqueFd other = m.Dial();
  const std::string msg = Pattern(200 * 1024, 'o');
  std::thread r([&] { EXPECT_TRUE(ReadAll(other.get()) == msg); });
  WriteAll(other.get(), msg);
  ::shutdown(other.get(), SHUT_WR);
  r.join();
  ::shutdown(stalled.get(), SHUT_RDWR);
  writer.join();
}

TEST(ChannelMux, AClosedConnectionEndsItsChannelAtTheOtherEnd) {
  MuxPair m;
  for (int i = 0; i < 50; ++i) {
    UniqueFd c = m.Dial();
    WriteAll(c.get(), "x");
    char ch = 0;
    ASSERT_EQ(::read(c.get(), &ch, 1), 1);
    EXPECT_EQ(ch, 'x');
  }  // each closes without a half close first
  UniqueFd last = m.Dial();
  WriteAll(last.get(), "end");
  ::shutdown(last.get(), SHUT_WR);
  EXPECT_EQ(ReadAll(last.get()), "end");
}

TEST(ChannelMux, AnOversizedFrameFromTheGuestEndsTheHostEnd) {
  int sp[2], ls = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  MuxOptions o;
  o.listen_fd = ls;
  Status st = OkStatus();
  std::thread host([&] { st = RunMux(sp[0], o); });
  std::string bad = MuxHeader(MuxFrame::kData, 1, 1u << 20);
  WriteAll(sp[1], bad);
  host.join();
  EXPECT_FALSE(st.ok());
  ::close(sp[0]);
  ::close(sp[1]);
  ::close(ls);
}

}  // namespace
}  // namespace sbx::agent
