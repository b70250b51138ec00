#include "base/tar.h"

#include <algorithm>
#include <cstring>

namespace sbx::tar {
namespace {

Error Bad(const std::string& msg) { return MakeError(Code::kInvalidArgument, "malformed tar: " + msg); }

// A NUL-terminated (or field-filling) string field.
std::string Field(const unsigned char* h, size_t off, size_t len) {
  const char* p = reinterpret_cast<const char*>(h + off);
  return std::string(p, strnlen(p, len));
}

// A numeric field: octal digits (space or NUL padded), or base-256 when the top bit of
// its first byte is set (GNU, for values past the octal range).
Result<uint64_t> Number(const unsigned char* h, size_t off, size_t len, const char* what) {
  const unsigned char* p = h + off;
  if (p[0] & 0x80) {
    if (p[0] != 0x80) return Bad(std::string("negative or oversized ") + what);
    uint64_t v = 0;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 55) return Bad(std::string(what) + " is too large");
      v = (v << 8) | p[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < len && p[i] == ' ') ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return Bad(std::string(what) + " is too large");
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  for (; i < len; ++i)
    if (p[i] != ' ' && p[i] != 0) return Bad(std::string("bad digit in ") + what);
  if (!any) return uint64_t{0};
  return v;
}

bool AllZero(const unsigned char* h) {
  for (size_t i = 0; i < kBlock; ++i)
    if (h[i]) return false;
  return true;
}

uint64_t PadOf(uint64_t size) { return (kBlock - size % kBlock) % kBlock; }

}  // namespace

Status Reader::Feed(std::string_view bytes) {
  while (!bytes.empty()) {
    switch (state_) {
      case State::kDone:
        return OkStatus();  // trailing blocks after the end marker are ignored
      case State::kHeader: {
        size_t take = std::min(bytes.size(), kBlock - block_.size());
        block_.append(bytes.substr(0, take));
        bytes.remove_prefix(take);
        if (block_.size() < kBlock) break;
        std::string h = std::move(block_);
        block_.clear();
        SBX_RETURN_IF_ERROR(OnHeader(reinterpret_cast<const unsigned char*>(h.data())));
        break;
      }
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), remaining_));
        if (take > 0) SBX_RETURN_IF_ERROR(sink_->OnData(bytes.substr(0, take)));
        bytes.remove_prefix(take);
        remaining_ -= take;
        if (remaining_ == 0) {
          SBX_RETURN_IF_ERROR(sink_->OnEntryEnd());
          state_ = padding_ ? State::kPadding : State::kHeader;
        }
        break;
      }
      case State::kExtended: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), remaining_));
        ext_.append(bytes.substr(0, take));
        bytes.remove_prefix(take);
        remaining_ -= take;
        if (remaining_ > 0) break;
        state_ = padding_ ? State::kPadding : State::kHeader;
        if (ext_type_ == 'L' || ext_type_ == 'K') {
          std::string v(ext_.c_str());  // NUL-terminated
          if (v.empty() || v.size() > kMaxName) return Bad("bad GNU long name");
          (ext_type_ == 'L' ? next_name_ : next_link_) = v;
        } else if (ext_type_ == 'x') {
          // Records: "LEN key=value\n", LEN counting the whole record.
          std::string_view rest = ext_;
          while (!rest.empty()) {
            size_t sp = rest.find(' ');
            if (sp == std::string_view::npos || sp == 0 || sp > 8) return Bad("bad pax record length");
            uint64_t len = 0;
            for (size_t i = 0; i < sp; ++i) {
              if (rest[i] < '0' || rest[i] > '9') return Bad("bad pax record length");
              len = len * 10 + (rest[i] - '0');
            }
            if (len <= sp + 1 || len > rest.size() || rest[len - 1] != '\n') return Bad("bad pax record");
            std::string_view rec = rest.substr(sp + 1, len - sp - 2);
            rest.remove_prefix(len);
            size_t eq = rec.find('=');
            if (eq == std::string_view::npos) return Bad("pax record without '='");
            std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
            if (key == "path" || key == "linkpath") {
              if (value.empty() || value.size() > kMaxName || value.find('\0') != std::string_view::npos)
                return Bad("bad pax " + std::string(key));
              (key == "path" ? next_name_ : next_link_) = std::string(value);
            } else if (key == "size") {
              if (value.empty() || value.size() > 19) return Bad("bad pax size");
              uint64_t v = 0;
              for (char c : value) {
                if (c < '0' || c > '9') return Bad("bad pax size");
                v = v * 10 + (c - '0');
              }
              next_size_ = v;
              next_size_set_ = true;
            }
          }
        }
        ext_.clear();
        break;
      }
      case State::kPadding: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), padding_));
        bytes.remove_prefix(take);
        padding_ -= take;
        if (padding_ == 0) state_ = State::kHeader;
        break;
      }
    }
  }
  return OkStatus();
}

Status Reader::OnHeader(const unsigned char* h) {
  if (AllZero(h)) {
    if (++zero_blocks_ == 2) state_ = State::kDone;
    return OkStatus();
  }
  zero_blocks_ = 0;
  auto sum = Number(h, 148, 8, "checksum");
  if (!sum.ok()) return sum.error();
  uint64_t u = 0;
  int64_t s = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    u += c;
    s += static_cast<signed char>(c);
  }
  if (*sum != u && static_cast<int64_t>(*sum) != s) return Bad("header checksum mismatch");
  auto size = Number(h, 124, 12, "size");
  if (!size.ok()) return size.error();
  char type = static_cast<char>(h[156]);
  if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
    if (*size > kMaxExtended) return Bad("extended header too large");
    ext_type_ = type;
    ext_.clear();
    remaining_ = *size;
    padding_ = PadOf(*size);
    state_ = remaining_ ? State::kExtended : (padding_ ? State::kPadding : State::kHeader);
    return OkStatus();
  }
  Entry e;
  std::string name = Field(h, 0, 100);
  bool ustar = std::memcmp(h + 257, "ustar", 5) == 0;
  if (ustar) {
    std::string prefix = Field(h, 345, 155);
    if (!prefix.empty()) name = prefix + "/" + name;
  }
  e.name = next_name_.empty() ? name : next_name_;
  e.linkname = next_link_.empty() ? Field(h, 157, 100) : next_link_;
  uint64_t sz = next_size_set_ ? next_size_ : *size;
  next_name_.clear();
  next_link_.clear();
  next_size_set_ = false;
  auto mode = Number(h, 100, 8, "mode");
  if (!mode.ok()) return mode.error();
  auto mtime = Number(h, 136, 12, "mtime");
  if (!mtime.ok()) return mtime.error();
  e.mode = static_cast<uint32_t>(*mode & 07777);
  e.mtime = static_cast<int64_t>(std::min<uint64_t>(*mtime, INT64_MAX));
  e.typeflag = type ? type : '0';
  bool has_data = true;
  switch (e.typeflag) {
    case '0': case '7': e.type = Type::kFile; break;
    case '5': e.type = Type::kDir; has_data = false; break;
    case '2': e.type = Type::kSymlink; has_data = false; break;
    case '1': e.type = Type::kHardlink; has_data = false; break;
    case '3': case '4': case '6': e.type = Type::kOther; has_data = false; break;
    default: e.type = Type::kOther; break;
  }
  // A name ending in '/' on an old-style regular entry is a directory.
  if (e.type == Type::kFile && !e.name.empty() && e.name.back() == '/' && type == 0) {
    e.type = Type::kDir;
    has_data = false;
  }
  if (e.name.empty()) return Bad("entry without a name");
  if (e.name.size() > kMaxName || e.linkname.size() > kMaxName) return Bad("name too long");
  e.size = has_data ? sz : 0;
  ++entries_;
  cur_ = e;
  SBX_RETURN_IF_ERROR(sink_->OnEntry(cur_));
  remaining_ = e.size;
  padding_ = PadOf(e.size);
  if (remaining_ == 0) {
    SBX_RETURN_IF_ERROR(sink_->OnEntryEnd());
    state_ = padding_ ? State::kPadding : State::kHeader;
  } else {
    state_ = State::kData;
  }
  return OkStatus();
}

Status Reader::Finish() {
  if (state_ == State::kDone) return OkStatus();
  if (state_ == State::kHeader && block_.empty()) return OkStatus();
  return Bad("the archive ends inside an entry");
}

namespace {

void PutOctal(std::string& h, size_t off, size_t len, uint64_t v) {
  // len-1 digits and a NUL.
  for (size_t i = len - 1; i-- > 0;) {
    h[off + i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  h[off + len - 1] = 0;
}

bool FitsOctal(uint64_t v, size_t len) { return (len - 1) * 3 >= 64 || v < (uint64_t{1} << ((len - 1) * 3)); }

std::string Block(const Entry& e, const std::string& name, const std::string& prefix,
                  const std::string& link, uint64_t size, char type) {
  std::string h(kBlock, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  PutOctal(h, 100, 8, e.mode & 07777);
  PutOctal(h, 108, 8, 0);
  PutOctal(h, 116, 8, 0);
  PutOctal(h, 124, 12, FitsOctal(size, 12) ? size : 0);
  PutOctal(h, 136, 12, e.mtime > 0 && FitsOctal(e.mtime, 12) ? e.mtime : 0);
  h[156] = type;
  std::memcpy(&h[157], link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(&h[257], "ustar", 6);
  h[263] = '0';
  h[264] = '0';
  std::memcpy(&h[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  PutOctal(h, 148, 7, sum);
  h[155] = ' ';
  return h;
}

void PaxRecord(std::string& out, const std::string& key, const std::string& value) {
  size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  out += std::to_string(len) + " " + key + "=" + value + "\n";
}

}  // namespace

std::string WriteHeader(const Entry& e) {
  char type = '0';
  switch (e.type) {
    case Type::kFile: type = '0'; break;
    case Type::kDir: type = '5'; break;
    case Type::kSymlink: type = '2'; break;
    case Type::kHardlink: type = '1'; break;
    case Type::kOther: type = e.typeflag; break;
  }
  uint64_t size = e.type == Type::kFile ? e.size : 0;
  // ustar: the name in 100 bytes, or split at a '/' into prefix (155) and name (100).
  std::string name = e.name, prefix;
  bool fits = name.size() <= 100;
  if (!fits && name.size() <= 256) {
    for (size_t cut = name.find('/'); cut != std::string::npos; cut = name.find('/', cut + 1)) {
      if (cut <= 155 && name.size() - cut - 1 <= 100 && cut > 0 && cut + 1 < name.size()) {
        prefix = name.substr(0, cut);
        name = name.substr(cut + 1);
        fits = true;
        break;
      }
    }
  }
  bool link_fits = e.linkname.size() <= 100;
  bool size_fits = FitsOctal(size, 12);
  std::string out;
  if (!fits || !link_fits || !size_fits) {
    std::string pax;
    if (!fits) PaxRecord(pax, "path", e.name);
    if (!link_fits) PaxRecord(pax, "linkpath", e.linkname);
    if (!size_fits) PaxRecord(pax, "size", std::to_string(size));
    Entry x;
    x.mode = 0644;
    x.mtime = e.mtime;
    out += Block(x, "PaxHeaders/entry", "", "", pax.size(), 'x');
    out += pax + Padding(pax.size());
    if (!fits) {
      name = e.name.substr(0, 100);
      prefix.clear();
    }
  }
  out += Block(e, name, prefix, link_fits ? e.linkname : e.linkname.substr(0, 100), size, type);
  return out;
}

std::string Padding(uint64_t size) { return std::string(PadOf(size), '\0'); }

std::string EndOfArchive() { return std::string(2 * kBlock, '\0'); }

}  // namespace sbx::tar
