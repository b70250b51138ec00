// Histogram: a Prometheus-style latency histogram with fixed millisecond buckets.
// Lock-free; any thread may observe or read.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

namespace sbx {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBoundsMs = {0.5, 1,   2,    5,    10,   25,    50,
                                                       100, 250, 500, 1000, 2500, 10000, 60000};

  void ObserveMs(double ms) {
    for (size_t i = 0; i < kBoundsMs.size(); ++i)
      if (ms <= kBoundsMs[i]) {
        buckets_[i].fetch_add(1, std::memory_order_relaxed);
        break;
      }
    count_.fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(static_cast<uint64_t>(ms * 1000), std::memory_order_relaxed);
  }

  // Appends the histogram as `name` (seconds, as Prometheus wants) with HELP text.
  void Write(std::ostringstream& o, const std::string& name, const std::string& help) const {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < kBoundsMs.size(); ++i) {
      cum += buckets_[i].load(std::memory_order_relaxed);
      o << name << "_bucket{le=\"" << kBoundsMs[i] / 1000 << "\"} " << cum << "\n";
    }
    uint64_t n = count_.load(std::memory_order_relaxed);
    o << name << "_bucket{le=\"+Inf\"} " << n << "\n";
    o << name << "_sum " << sum_us_.load(std::memory_order_relaxed) / 1e6 << "\n";
    o << name << "_count " << n << "\n";
  }

 private:
  std::array<std::atomic<uint64_t>, kBoundsMs.size()> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

}  // namespace sbx
