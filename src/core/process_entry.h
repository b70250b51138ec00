// The entry of one background process in ProcessTable, shared by its files
// (processes.cc: start, output, stdin and signals; process_attach.cc: attaching to the
// agent's keepers again, detaching around a hibernate). Private to core.
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/client.h"
#include "core/processes.h"

namespace sbx::core {

inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct ProcessTable::Proc {
  Proc(std::string sb, boost::asio::strand<boost::asio::any_io_executor> s, size_t cap)
      : sandbox(std::move(sb)), strand(s), conn(std::make_shared<agent::Conn>(s)), ring_cap(cap) {}
  std::string sandbox;
  boost::asio::strand<boost::asio::any_io_executor> strand;
  // The current connection (strand only, after start). Shared: a reader or writer holds
  // the one it works on, so a newer connection never frees it under them.
  std::shared_ptr<agent::Conn> conn;
  bool attaching = false;     // strand only: an attach is under way (one at a time)
  int64_t last_attach_ms = 0;  // strand only: when the last attach began (for back-off)
  std::shared_ptr<AgentLease> lease;  // held while sbxd follows a running process
  std::mutex mu;                      // guards info and the ring
  ProcessInfo info;
  std::deque<OutputChunk> ring;
  size_t ring_size = 0, ring_cap;
  std::deque<std::string> outq;  // frames to send (strand only)
  // Bytes of frames queued and not yet written (any thread): stdin is refused past a cap,
  // so that a process that does not read holds sbxd's memory to that much.
  std::atomic<uint64_t> queued_bytes{0};
  bool writing = false;          // a WriteLoop runs (strand only)
  bool close_when_written = false;  // strand only: the release is queued; close after it
  // Strand only: the connection closes on purpose (a hibernate); `detached` is told when
  // its reader has stopped.
  bool detaching = false;
  std::shared_ptr<std::promise<void>> detached;
  uint64_t recv_seq = 0;  // strand only: the seq of the next output frame on this connection
  // Followers waiting for output (strand only): the reader cancels their timers.
  std::vector<std::shared_ptr<boost::asio::steady_timer>> waiters;
};

}  // namespace sbx::core
