// A gVisor sandbox's memory, saved by runsc: what a memory template keeps beside its files
// (OverlayFiles' capture with memory), and what runsc says when it cannot save it.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"
#include "runtime/runtime.h"

namespace sbx::runtime::gvisor {

// The shape a sandbox was saved with; a restore must have the same (gVisor's kernel keeps
// the memory size and CPUs it booted with, and its network stack the links it had). Its
// file, written last, marks the saved memory whole.
struct SavedShape {
  uint64_t memory_bytes = 0;
  int cpus = 0;
  bool network = false;
};
SavedShape ShapeOf(const StartSpec& spec);
Status WriteShape(const std::string& memory_dir, const SavedShape& shape);
Result<SavedShape> ReadShape(const std::string& memory_dir);
// Why a sandbox of `spec` cannot start from memory saved with `saved` ("" if it can).
std::string Mismatch(const SavedShape& saved, const StartSpec& spec);

// What runsc says when it refuses a save (the line of its log `log` that says it failed,
// before its stack trace), as the API's error: gVisor's network stack cannot save a TCP
// connection, nor one it closed within about a minute (409); `instead` says what the
// caller can do instead ("pause with mode \"freeze\"").
Error SaveRefused(const std::string& log, const std::string& instead);

}  // namespace sbx::runtime::gvisor
