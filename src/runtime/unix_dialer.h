// Dialing an agent that listens on a unix stream socket: a path on the host, or an
// abstract name ("@name") in a network namespace that the dialer holds open (so the
// address stays good whatever becomes of the processes in it). Used by the container
// runtime (its sandboxes' agents) and the fake one (a path).
#pragma once

#include <memory>
#include <string>

#include "agent/protocol.h"
#include "base/unique_fd.h"

namespace sbx::runtime {

class UnixDialer : public agent::Dialer {
 public:
  // `netns`: the network namespace the socket is made in (null: sbxd's own).
  UnixDialer(std::string address, std::shared_ptr<UniqueFd> netns = nullptr)
      : address_(std::move(address)), netns_(std::move(netns)) {}
  Result<std::optional<UniqueFd>> TryDial() const override;

 private:
  std::string address_;
  std::shared_ptr<UniqueFd> netns_;
};

// Dials the socket `name` in a host folder through an O_PATH handle on the folder
// (/proc/self/fd/N/name): the folder's path may be longer than a socket address holds.
// The handle stays good whatever becomes of the folder's path.
struct FolderFd {
  explicit FolderFd(UniqueFd fd) : folder(std::move(fd)) {}
  UniqueFd folder;
};
class FolderDialer : private FolderFd, public UnixDialer {
 public:
  FolderDialer(UniqueFd folder, const std::string& name)
      : FolderFd(std::move(folder)), UnixDialer("/proc/self/fd/" + std::to_string(FolderFd::folder.get()) + "/" + name) {}
};
// A FolderDialer of `name` in the folder `dir`.
Result<agent::DialerPtr> DialerInFolder(const std::string& dir, const std::string& name);

}  // namespace sbx::runtime
