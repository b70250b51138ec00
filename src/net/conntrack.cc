#include "net/conntrack.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/unique_fd.h"

namespace sbx::net {

namespace {

// One ctnetlink request: the header, nfgenmsg, then the mark and its mask.
std::vector<char> Request(uint16_t msg, uint16_t flags, uint32_t mark) {
  std::vector<char> b(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
  auto add = [&](uint16_t type, uint32_t value) {
    size_t at = b.size();
    b.resize(at + NLA_ALIGN(NLA_HDRLEN + 4));
    auto* a = reinterpret_cast<struct nlattr*>(b.data() + at);
    a->nla_len = NLA_HDRLEN + 4;
    a->nla_type = type;
    uint32_t be = htonl(value);
    std::memcpy(b.data() + at + NLA_HDRLEN, &be, 4);
  };
  add(CTA_MARK, mark);
  add(CTA_MARK_MASK, 0xffffffffu);
  auto* h = reinterpret_cast<struct nlmsghdr*>(b.data());
  h->nlmsg_len = static_cast<uint32_t>(b.size());
  h->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_CTNETLINK << 8) | msg);
  h->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  auto* g = reinterpret_cast<struct nfgenmsg*>(b.data() + NLMSG_HDRLEN);
  g->nfgen_family = AF_INET;
  g->version = NFNETLINK_V0;
  return b;
}

Result<UniqueFd> Open() {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  if (!fd.valid()) return ErrnoError("ctnetlink socket");
  struct sockaddr_nl sa = {};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) != 0) return ErrnoError("bind ctnetlink");
  struct timeval tv = {5, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads answers until the acknowledgement.
Status Drain(int fd, const char* what) {
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(what);
    }
    for (auto* h = reinterpret_cast<struct nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) return OkStatus();
      if (h->nlmsg_type == NLMSG_ERROR) {
        int err = -reinterpret_cast<struct nlmsgerr*>(NLMSG_DATA(h))->error;
        if (err == 0 || err == ENOENT) return OkStatus();  // nothing matched: nothing to forget
        return ErrnoError(what, err);
      }
    }
  }
}

}  // namespace

Status ForgetConnections(uint32_t mark) {
  SBX_ASSIGN_OR_RETURN(UniqueFd fd, Open());
  std::vector<char> req = Request(IPCTNL_MSG_CT_DELETE, NLM_F_ACK, mark);
  if (::send(fd.get(), req.data(), req.size(), 0) < 0) return ErrnoError("forget a sandbox's connections");
  return Drain(fd.get(), "forget a sandbox's connections");
}

}  // namespace sbx::net
