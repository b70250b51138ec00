// Sandbox output on this terminal. Code in a sandbox is not trusted: escape sequences in
// its output could retitle the window, rewrite what was printed before, set the clipboard
// or answer back as typed input. On a terminal they are shown as visible text; written
// to a pipe or a file, output stays byte-exact.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "cli.h"

namespace sbx::cli {
namespace {

bool g_raw = false;
constexpr char kHex[] = "0123456789abcdef";

// `cat -v` style: ^[ for ESC, ^? for DEL, \u009b for a C1 control.
void Neutralise(std::string_view in, std::string* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    // Newlines and tabs pass as they are, with the printable characters (the last branch).
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      out->push_back('^');
      out->push_back(c == 0x7f ? '?' : static_cast<char>(c + 0x40));
    } else if (c == 0xc2 && i + 1 < in.size() && static_cast<unsigned char>(in[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(in[i + 1]) <= 0x9f) {
      // U+0080..U+009F in UTF-8: C1 controls (CSI is U+009B).
      unsigned char c1 = static_cast<unsigned char>(in[++i]);
      *out += "\\u00";
      out->push_back(kHex[c1 >> 4]);
      out->push_back(kHex[c1 & 15]);
    } else if (c >= 0x80 && c <= 0x9f) {
      // A lone 8-bit C1 byte (not UTF-8): a terminal in 8-bit mode would obey it.
      *out += "\\x";
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

bool WriteAll(int fd, std::string_view d) {
  while (!d.empty()) {
    ssize_t n = ::write(fd, d.data(), d.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    d.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

void Progress::Update(uint64_t done, uint64_t total) {
  constexpr uint64_t kShowFrom = 8 << 20;
  if (std::max(done, total) < kShowFrom) return;
  const double mib = 1048576.0;
  bool tty = ::isatty(2);
  if (total == 0) {  // size unknown: a line (or a redraw) per 8 MiB
    int step = static_cast<int>(done / kShowFrom);
    if (step == last_) return;
    last_ = step;
    std::fprintf(stderr, tty ? "\r%s: %.1f MiB" : "%s: %.1f MiB\n", what_.c_str(), done / mib);
    shown_ = true;
    return;
  }
  int pct = static_cast<int>(std::min<uint64_t>(done, total) * 100 / total);
  if (tty) {
    if (pct == last_) return;
    int bar = pct / 4;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %.1f/%.1f MiB", what_.c_str(), bar, "#########################",
                 25 - bar, "", pct, std::min(done, total) / mib, total / mib);
  } else {
    if (last_ >= 0 && pct / 10 == last_ / 10) return;
    std::fprintf(stderr, "%s: %d%% (%.1f of %.1f MiB)\n", what_.c_str(), pct / 10 * 10, std::min(done, total) / mib,
                 total / mib);
  }
  last_ = pct;
  shown_ = true;
}

void Progress::Done() {
  if (shown_ && ::isatty(2)) std::fprintf(stderr, "\n");
  shown_ = false;
}

void SetRawOutput(bool raw) { g_raw = raw; }

bool WriteSandboxOutput(int fd, std::string_view data) {
  if (g_raw || !::isatty(fd)) return WriteAll(fd, data);
  std::string shown;
  shown.reserve(data.size() + 16);
  Neutralise(data, &shown);
  return WriteAll(fd, shown);
}

}  // namespace sbx::cli
