// multipart/form-data bodies (RFC 7578), as E2B's SDK uploads files.
#include "api/multipart.h"

#include <cctype>

namespace sbx::api {

std::string HeaderParam(std::string_view v, const std::string& name) {
  // Parameter names are case-insensitive, their values not: found in a lower-case copy,
  // taken from the original.
  std::string lower(v), key = name + "=";
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = 0;
  while ((at = lower.find(key, at)) != std::string::npos) {
    if (at > 0 && v[at - 1] != ';' && v[at - 1] != ' ') {
      at += name.size();
      continue;
    }
    std::string_view rest = v.substr(at + name.size() + 1);
    if (!rest.empty() && rest[0] == '"') {
      size_t close = rest.find('"', 1);
      return std::string(rest.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
    }
    return std::string(rest.substr(0, rest.find(';')));
  }
  return "";
}

MultipartReader::MultipartReader(std::string boundary) : delim_("--" + boundary) {
  if (boundary.empty()) state_ = State::kFailed;
}

Status MultipartReader::Feed(std::string_view piece, std::vector<MultipartEvent>* out) {
  if (state_ == State::kFailed) return MakeError(Code::kInvalidArgument, "the multipart body has no boundary");
  if (state_ == State::kDone) return OkStatus();  // the epilogue is ignored
  buf_.append(piece);
  while (true) {
    auto more = Step(out);
    if (!more.ok()) {
      state_ = State::kFailed;
      buf_.clear();
      return more.error();
    }
    if (!*more) return OkStatus();
  }
}

Status MultipartReader::Finish() const {
  switch (state_) {
    case State::kDone: return OkStatus();
    case State::kPreamble: return MakeError(Code::kInvalidArgument, "the multipart body has no boundary line");
    case State::kHeaders: return MakeError(Code::kInvalidArgument, "a multipart part has no end of headers");
    case State::kContent: return MakeError(Code::kInvalidArgument, "a multipart part does not end");
    case State::kAfterDelimiter: return MakeError(Code::kInvalidArgument, "the multipart body ends inside a boundary line");
    case State::kFailed: break;
  }
  return MakeError(Code::kInvalidArgument, "the multipart body is malformed");
}

Result<bool> MultipartReader::Step(std::vector<MultipartEvent>* out) {
  switch (state_) {
    case State::kPreamble: {
      size_t at = buf_.find(delim_);
      if (at == std::string::npos) {
        // Only the tail could still begin a delimiter.
        if (buf_.size() >= delim_.size()) buf_.erase(0, buf_.size() - (delim_.size() - 1));
        return false;
      }
      buf_.erase(0, at + delim_.size());
      state_ = State::kAfterDelimiter;
      return true;
    }
    case State::kAfterDelimiter: {
      if (buf_.size() < 2) return false;
      if (buf_.compare(0, 2, "--") == 0) {
        state_ = State::kDone;
        buf_.clear();
        return false;
      }
      if (buf_.compare(0, 2, "\r\n") != 0) return MakeError(Code::kInvalidArgument, "a multipart boundary line is malformed");
      // The boundary line's CRLF stays: a part with no header at all is that CRLF and the
      // blank line's.
      state_ = State::kHeaders;
      return true;
    }
    case State::kHeaders: {
      size_t end = buf_.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (buf_.size() > kMaxPartHeader) return MakeError(Code::kInvalidArgument, "a multipart part's headers are too large");
        return false;
      }
      MultipartEvent p;
      p.kind = MultipartEvent::kPart;
      std::string_view head = std::string_view(buf_).substr(2, end);  // each line ends with CRLF
      for (size_t line = 0; line < head.size();) {
        size_t eol = head.find("\r\n", line);
        std::string_view h = head.substr(line, eol - line);
        line = eol == std::string_view::npos ? head.size() : eol + 2;
        size_t colon = h.find(':');
        if (colon == std::string_view::npos) continue;
        std::string name(h.substr(0, colon));
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (name != "content-disposition") continue;
        p.name = HeaderParam(h.substr(colon + 1), "name");
        p.filename = HeaderParam(h.substr(colon + 1), "filename");
      }
      out->push_back(std::move(p));
      buf_.erase(0, end + 4);
      state_ = State::kContent;
      return true;
    }
    case State::kContent: {
      // The next delimiter line: the boundary after a CRLF, then a CRLF or "--" (a line
      // that only starts like it is content).
      const std::string line = "\r\n" + delim_;
      size_t from = 0, safe = 0;
      bool ended = false;
      while (true) {
        size_t at = buf_.find(line, from);
        if (at == std::string::npos) {
          safe = buf_.size() >= line.size() ? buf_.size() - (line.size() - 1) : 0;
          break;
        }
        if (at + line.size() + 2 > buf_.size()) {
          safe = at;  // whether it is the delimiter shows with more bytes
          break;
        }
        std::string_view after = std::string_view(buf_).substr(at + line.size(), 2);
        if (after == "\r\n" || after == "--") {
          safe = at;
          ended = true;
          break;
        }
        from = at + 1;
      }
      if (safe > 0) {
        MultipartEvent d;
        d.data = buf_.substr(0, safe);
        out->push_back(std::move(d));
      }
      if (!ended) {
        buf_.erase(0, safe);
        return false;
      }
      MultipartEvent e;
      e.kind = MultipartEvent::kPartEnd;
      out->push_back(std::move(e));
      buf_.erase(0, safe + line.size());
      state_ = State::kAfterDelimiter;
      return true;
    }
    case State::kDone:
    case State::kFailed: return false;
  }
  return false;
}

}  // namespace sbx::api
