// Tar archives (POSIX ustar with pax extended headers, and GNU long names when reading):
// a streaming reader that never trusts a header, and the pieces to write one. Pure: no
// file system access, so it can be fuzzed. Any thread; one Reader per stream.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace sbx::tar {

constexpr size_t kBlock = 512;
// Limits on what a header may claim: names and link targets, and pax/GNU records.
constexpr size_t kMaxName = 4096;
constexpr size_t kMaxExtended = 64 * 1024;

enum class Type { kFile, kDir, kSymlink, kHardlink, kOther };

struct Entry {
  std::string name;      // as written in the archive (unchecked)
  std::string linkname;  // symlink or hard link target
  Type type = Type::kFile;
  char typeflag = '0';   // the raw type byte (kOther: which one)
  uint64_t size = 0;     // data bytes that follow (files only)
  uint32_t mode = 0644;
  int64_t mtime = 0;     // seconds since the epoch
};

// Receives the archive as it is parsed. A non-OK status stops the reader with it.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status OnEntry(const Entry& e) = 0;
  virtual Status OnData(std::string_view chunk) = 0;  // the current file's bytes, in order
  virtual Status OnEntryEnd() = 0;
};

class Reader {
 public:
  explicit Reader(Sink* sink) : sink_(sink) {}
  // Parses more of the stream.
  Status Feed(std::string_view bytes);
  // The stream ended: fails unless it ended between entries (the end-of-archive blocks
  // may be missing, as GNU tar allows).
  Status Finish();
  uint64_t entries() const { return entries_; }

 private:
  Status OnHeader(const unsigned char* h);
  enum class State { kHeader, kData, kPadding, kExtended, kDone } state_ = State::kHeader;
  Sink* sink_;
  std::string block_;     // a partial header block
  uint64_t remaining_ = 0;  // data or extended bytes left in the current entry
  uint64_t padding_ = 0;
  char ext_type_ = 0;     // 'x', 'g', 'L' or 'K' while reading an extended record
  std::string ext_;       // its bytes
  std::string next_name_, next_link_;  // from pax or GNU records, for the next entry
  bool next_size_set_ = false;
  uint64_t next_size_ = 0;
  Entry cur_;
  int zero_blocks_ = 0;
  uint64_t entries_ = 0;
};

// The header blocks for `e` (with a pax header first when a name, link target or size does
// not fit ustar's fields).
std::string WriteHeader(const Entry& e);
// The zero bytes that pad `size` data bytes to a whole block.
std::string Padding(uint64_t size);
// The end-of-archive marker (two zero blocks).
std::string EndOfArchive();

}  // namespace sbx::tar
