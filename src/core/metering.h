// Metering: what sandboxes cost. A per-second sandbox is billed in periods (one per
// stretch of running, persisted as it opens and closes); a serverless call's sandbox is
// billed per call. Each period also keeps the network bytes the sandbox moved within it.
// Answers usage over a window. Any thread; it holds no lock of its own (the record it is
// given belongs to the caller, who holds the table's lock).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "core/types.h"
#include "storage/store.h"

namespace sbx::core {

// Billed compute over a time window, and the network bytes sent and received in it.
struct UsageLine {
  std::string id, name, type;
  double seconds = 0, cost_usd = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0;
};
struct UsageReport {
  int64_t from_ms = 0, to_ms = 0;
  std::vector<UsageLine> sandboxes;                          // by first period in the window
  std::map<std::string, std::pair<double, double>> by_type;  // seconds, cost
  int64_t calls = 0;                                         // serverless calls
  double calls_usd = 0;
  double seconds = 0, compute_usd = 0, total_usd = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0;
};

class Metering {
 public:
  Metering(storage::Store* store, const TypeTable* types, std::function<int64_t()> now_ms, double call_usd)
      : store_(store), types_(types), now_ms_(std::move(now_ms)), call_usd_(call_usd) {}

  using Bytes = std::pair<uint64_t, uint64_t>;  // sent, received
  // How to read the network bytes a sandbox has moved in all: from its record (the
  // caller holds the table's lock; `linked`: its link, if it has one, counts too), and
  // by id, for a running one (takes the lock; nullopt: not known).
  void SetNetworkBytes(std::function<Bytes(const storage::SandboxRecord&, bool linked)> of_record,
                       std::function<std::optional<Bytes>(const std::string&)> of_id) {
    bytes_of_record_ = std::move(of_record);
    bytes_of_id_ = std::move(of_id);
  }

  // It became running now: a new billing period (per-second sandboxes).
  void Open(storage::SandboxRecord& r) const;
  // It stops running now: the period closes and its time is added to billed_ms.
  // `link_counted`: its link's bytes are in its row already (the link went, or is going).
  void Close(storage::SandboxRecord& r, bool link_counted = false) const;
  // Billed time so far (the open period included) and its cost.
  std::pair<double, double> Billed(const storage::SandboxRecord& r) const;
  // Records one serverless call on a disk (billed per call).
  Status RecordCall(const std::string& disk_id, const std::string& sandbox_id) const;
  double call_usd() const { return call_usd_; }
  // Billed seconds and cost per sandbox, per type and in total, within [from, to); and
  // network bytes per sandbox and in total (a period's bytes shared out over its time, so
  // that windows that split it split them too).
  Result<UsageReport> Usage(int64_t from_ms, int64_t to_ms) const;

 private:
  storage::Store* store_;
  const TypeTable* types_;
  std::function<int64_t()> now_ms_;
  double call_usd_;
  std::function<Bytes(const storage::SandboxRecord&, bool)> bytes_of_record_;
  std::function<std::optional<Bytes>(const std::string&)> bytes_of_id_;
};

}  // namespace sbx::core
