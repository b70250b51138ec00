// Copies an overlay upper directory into a new read-only layer, keeping what overlayfs
// needs: data, modes, owners, times, symlinks, whiteouts (0/0 character devices), fifos and
// every extended attribute (user.overlay.opaque and friends). Hard links inside the tree
// stay hard links. Any thread; the source must not change meanwhile (the caller freezes
// the sandbox).
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace sbx::layers {

struct CopyStats {
  uint64_t files = 0;
  uint64_t bytes = 0;
};

// `dst` must not exist; it is created.
Result<CopyStats> CopyTree(const std::string& src, const std::string& dst);

}  // namespace sbx::layers
