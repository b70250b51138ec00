#include "core/metering.h"

#include <algorithm>

#include "base/log.h"

namespace sbx::core {

void Metering::Close(storage::SandboxRecord& r, bool link_counted) const {
  if (r.state == "running" && r.started_ms > 0) {
    int64_t now = now_ms_();
    r.billed_ms += std::max<int64_t>(0, now - r.started_ms);
    if (r.billing == "time") {
      const Bytes b = bytes_of_record_ ? bytes_of_record_(r, !link_counted) : Bytes{0, 0};
      Status st = store_->ClosePeriod(r.id, now, b.first, b.second);
      if (!st.ok()) SBX_LOG(kError) << "closing the billing period of " << r.id << ": " << st.error().message;
    }
  }
  r.started_ms = 0;
}

void Metering::Open(storage::SandboxRecord& r) const {
  r.started_ms = now_ms_();
  if (r.billing != "time") return;
  auto t = types_->Find(r.type);
  const Bytes b = bytes_of_record_ ? bytes_of_record_(r, true) : Bytes{0, 0};
  Status st = store_->OpenPeriod({r.id, r.name, r.type, t.ok() ? t->usd_per_hour : 0, r.started_ms, 0, b.first, b.second});
  if (!st.ok()) SBX_LOG(kError) << "opening the billing period of " << r.id << ": " << st.error().message;
}

std::pair<double, double> Metering::Billed(const storage::SandboxRecord& r) const {
  int64_t ms = r.billed_ms;
  if (r.state == "running" && r.started_ms > 0) ms += std::max<int64_t>(0, now_ms_() - r.started_ms);
  auto t = types_->Find(r.type);
  return {ms / 1000.0, t.ok() ? CostUsd(ms, t->usd_per_hour) : 0};
}

Status Metering::RecordCall(const std::string& disk_id, const std::string& sandbox_id) const {
  return store_->InsertCall({disk_id, sandbox_id, now_ms_(), call_usd_});
}

Result<UsageReport> Metering::Usage(int64_t from_ms, int64_t to_ms) const {
  if (to_ms <= from_ms) return MakeError(Code::kInvalidArgument, "\"to\" must be after \"from\"");
  SBX_ASSIGN_OR_RETURN(auto periods, store_->PeriodsBetween(from_ms, to_ms));
  SBX_ASSIGN_OR_RETURN(auto calls, store_->CallsBetween(from_ms, to_ms));
  int64_t now = now_ms_();
  UsageReport u;
  u.from_ms = from_ms;
  u.to_ms = to_ms;
  std::map<std::string, size_t> index;
  for (const auto& p : periods) {
    int64_t a = std::max(p.start_ms, from_ms);
    int64_t b = std::min(p.end_ms ? p.end_ms : std::max(now, p.start_ms), to_ms);
    if (b < a) continue;
    int64_t ms = b - a;
    double usd = CostUsd(ms, p.usd_per_hour);
    auto [it, fresh] = index.emplace(p.sandbox_id, u.sandboxes.size());
    if (fresh) u.sandboxes.push_back({p.sandbox_id, p.name, p.type, 0, 0});
    auto& line = u.sandboxes[it->second];
    line.seconds += ms / 1000.0;
    line.cost_usd += usd;
    // Its bytes: as closed, or so far for an open one; the window's share of them.
    Bytes moved{p.tx_bytes, p.rx_bytes};
    if (p.end_ms == 0) {
      auto total = bytes_of_id_ ? bytes_of_id_(p.sandbox_id) : std::nullopt;
      moved = total ? Bytes{total->first > p.tx_open ? total->first - p.tx_open : 0,
                            total->second > p.rx_open ? total->second - p.rx_open : 0}
                    : Bytes{0, 0};
    }
    const int64_t span = (p.end_ms ? p.end_ms : std::max(now, p.start_ms)) - p.start_ms;
    const double share = span > 0 ? static_cast<double>(ms) / static_cast<double>(span) : 1.0;
    const auto tx = static_cast<uint64_t>(static_cast<double>(moved.first) * share);
    const auto rx = static_cast<uint64_t>(static_cast<double>(moved.second) * share);
    line.tx_bytes += tx;
    line.rx_bytes += rx;
    u.tx_bytes += tx;
    u.rx_bytes += rx;
    auto& t = u.by_type[p.type];
    t.first += ms / 1000.0;
    t.second += usd;
    u.seconds += ms / 1000.0;
    u.compute_usd += usd;
  }
  for (const auto& c : calls) {
    ++u.calls;
    u.calls_usd += c.usd;
  }
  u.total_usd = u.compute_usd + u.calls_usd;
  return u;
}

}  // namespace sbx::core
