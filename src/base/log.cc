#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace sbx::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
const char* Name(Level l) {
  switch (l) {
    case Level::kDebug: return "D";
    case Level::kInfo: return "I";
    case Level::kWarn: return "W";
    case Level::kError: return "E";
  }
  return "?";
}
}  // namespace

void SetLevel(Level level) { g_level = static_cast<int>(level); }
bool Enabled(Level level) { return static_cast<int>(level) >= g_level.load(); }

void Write(Level level, const std::string& line) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char head[64];
  std::snprintf(head, sizeof head, "%s %02d:%02d:%02d.%03d ", Name(level), tm.tm_hour, tm.tm_min,
                tm.tm_sec, ms);
  std::string out = head + line + "\n";
  ssize_t unused = ::write(2, out.data(), out.size());
  (void)unused;
}

}  // namespace sbx::log
