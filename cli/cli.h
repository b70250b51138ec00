// Shared pieces of the sbx CLI. Main thread only.
#pragma once

#include <string>

#include "http_client.h"

namespace sbx::cli {

struct Globals {
  std::string url;
  std::string api_key;
  bool json = false;
};

// `sbx bench`: returns the process exit code.
int RunBench(const Globals& g, int runs, const std::string& image, bool peers);
// `sbx image build NAME`: builds (or reuses from the cache) a rootfs tarball and imports it.
int RunImageBuild(const Globals& g, const std::string& name, const std::string& cache_dir);

}  // namespace sbx::cli
