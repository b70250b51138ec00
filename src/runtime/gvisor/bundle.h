// The OCI bundle of a gVisor sandbox: what runsc is told to build (root, mounts, user
// mappings, capabilities, limits) and the files of the sandbox's folder it uses.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/runtime.h"

namespace sbx::runtime::gvisor {

// Inside the sandbox: the folder holding the agent's socket (a host folder, unmounted by
// the agent once it listens) and sbxd's folder of the in-sandbox API and the agent's binary.
constexpr const char* kCtlInside = "/run/sbx-ctl";
constexpr const char* kApiInside = "/run/sbx";

// Paths in the sandbox's folder.
inline std::string RootOf(const std::string& dir) { return dir + "/root"; }      // the overlay
inline std::string CtlOf(const std::string& dir) { return dir + "/ctl"; }        // the agent's socket
inline std::string BundleOf(const std::string& dir) { return dir + "/bundle"; }  // config.json, logs
inline std::string NetnsOf(const std::string& dir) { return dir + "/netns"; }    // its network namespace

// config.json for the sandbox `spec`: the agent (opts.agent_copy in opts.api_dir) as its
// first process, running as root of the user mapping [0, uid_count) -> [uid_base, ...),
// on the network namespace runsc runs in (NetnsOf). `cgroup`: the sandbox's cgroup (a path below each hierarchy's root),
// made by sbxd with the same limits.
nlohmann::json BundleSpec(const GvisorOptions& opts, const StartSpec& spec, const std::string& cgroup);

// The agent's init.json (the part of the set-up runsc does not do).
std::string AgentInit(const GvisorOptions& opts, const StartSpec& spec);

}  // namespace sbx::runtime::gvisor
