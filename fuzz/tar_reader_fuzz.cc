// A tar stream as an upload to a sandbox's archive route: the agent parses it inside the
// sandbox, but a crash or a runaway there would still fail the user's call, so the reader
// must refuse malformed headers cleanly. Fed in uneven pieces; the sink checks that the
// data handed out for each entry is exactly the size its header announced.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "base/tar.h"

namespace {

class Checker : public sbx::tar::Sink {
 public:
  sbx::Status OnEntry(const sbx::tar::Entry& e) override {
    if (in_entry_) abort();  // entries never nest
    if (e.name.empty() || e.name.size() > sbx::tar::kMaxName) abort();
    in_entry_ = true;
    want_ = e.size;
    got_ = 0;
    return sbx::OkStatus();
  }
  sbx::Status OnData(std::string_view chunk) override {
    if (!in_entry_) abort();
    got_ += chunk.size();
    if (got_ > want_) abort();
    return sbx::OkStatus();
  }
  sbx::Status OnEntryEnd() override {
    if (!in_entry_ || got_ != want_) abort();
    in_entry_ = false;
    return sbx::OkStatus();
  }

 private:
  bool in_entry_ = false;
  uint64_t want_ = 0, got_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Checker c;
  sbx::tar::Reader r(&c);
  size_t off = 0, step = size ? (data[0] % 13) * 97 + 1 : 1;
  while (off < size) {
    size_t n = std::min(step, size - off);
    if (!r.Feed(std::string_view(reinterpret_cast<const char*>(data + off), n)).ok()) return 0;
    off += n;
  }
  (void)r.Finish();
  return 0;
}
