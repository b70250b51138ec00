#include "api/conn_budget.h"

namespace sbx::api {

std::optional<ConnBudget::Slot> ConnBudget::Take(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (key.empty()) {
    if (limits_.max_connections > 0 && total_ >= limits_.max_connections) return std::nullopt;
    ++total_;
  } else {
    int& n = per_key_[key];
    if (limits_.max_sandbox_connections > 0 && n >= limits_.max_sandbox_connections) return std::nullopt;
    ++n;
  }
  return Slot(shared_from_this(), key);
}

void ConnBudget::Release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (key.empty()) {
    --total_;
    return;
  }
  auto it = per_key_.find(key);
  if (it != per_key_.end() && --it->second <= 0) per_key_.erase(it);
}

ConnBudget::Unknown ConnBudget::Admit(const std::string& source, std::function<void()> evict) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limits_.max_unknown_per_source > 0 && unknown_per_source_[source] >= limits_.max_unknown_per_source)
    EvictOldestLocked(source);
  else if (limits_.max_unknown_connections > 0 && static_cast<int>(unknown_.size()) >= limits_.max_unknown_connections)
    EvictOldestLocked("");
  const uint64_t seq = next_seq_++;
  unknown_.push_back({seq, source, std::move(evict)});
  ++unknown_per_source_[source];
  return Unknown(shared_from_this(), seq);
}

void ConnBudget::EvictOldestLocked(const std::string& source) {
  for (auto it = unknown_.begin(); it != unknown_.end(); ++it) {
    if (!source.empty() && it->source != source) continue;
    // It leaves the list now: its own ticket then finds nothing to forget.
    if (it->evict) it->evict();
    if (--unknown_per_source_[it->source] <= 0) unknown_per_source_.erase(it->source);
    unknown_.erase(it);
    return;
  }
}

void ConnBudget::Forget(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = unknown_.begin(); it != unknown_.end(); ++it) {
    if (it->seq != seq) continue;
    if (--unknown_per_source_[it->source] <= 0) unknown_per_source_.erase(it->source);
    unknown_.erase(it);
    return;
  }
}

int ConnBudget::unknown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(unknown_.size());
}

void ConnBudget::Unknown::Known() {
  if (!c_) return;
  c_->Forget(seq_);
  c_.reset();
}

}  // namespace sbx::api
