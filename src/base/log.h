// Minimal leveled logging to stderr. Thread-safe (one write(2) per line).
#pragma once

#include <sstream>
#include <string>

namespace sbx::log {

enum class Level { kDebug, kInfo, kWarn, kError };
void SetLevel(Level level);
bool Enabled(Level level);
void Write(Level level, const std::string& line);

class Line {
 public:
  explicit Line(Level l) : level_(l) {}
  ~Line() { Write(level_, os_.str()); }
  template <typename T>
  Line& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream os_;
};

}  // namespace sbx::log

#define SBX_LOG(lvl) \
  if (::sbx::log::Enabled(::sbx::log::Level::lvl)) ::sbx::log::Line(::sbx::log::Level::lvl)
