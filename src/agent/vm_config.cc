#include "agent/vm_config.h"

#include <nlohmann/json.hpp>

namespace sbx::agent {

Result<VmConfig> VmConfig::FromJson(const std::string& s) {
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (!j.is_object()) return MakeError(Code::kInvalidArgument, "the VM's config is not a JSON object");
  VmConfig c;
  c.hostname = j.value("hostname", std::string());
  c.layers = j.value("layers", 0);
  c.layer_roots = j.value("layer_roots", std::vector<std::string>());
  c.no_new_privs = j.value("no_new_privs", true);
  c.nameserver = j.value("nameserver", std::string());
  c.tmp_bytes = j.value("tmp_bytes", uint64_t{0});
  c.address = j.value("address", std::string());
  c.gateway = j.value("gateway", std::string());
  c.prefix = j.value("prefix", 31);
  c.address6 = j.value("address6", std::string());
  c.gateway6 = j.value("gateway6", std::string());
  c.mac = j.value("mac", std::string());
  c.probe = j.value("probe", false);
  c.disks = j.value("disks", std::vector<std::string>());
  c.vsock = j.value("vsock", false);
  return c;
}

std::string VmConfig::ToJson() const {
  nlohmann::json j = {{"hostname", hostname}, {"layers", layers},     {"no_new_privs", no_new_privs},
                      {"nameserver", nameserver}, {"tmp_bytes", tmp_bytes}};
  if (!address.empty()) j.update({{"address", address}, {"gateway", gateway}, {"prefix", prefix}});
  if (!address6.empty()) j.update({{"address6", address6}, {"gateway6", gateway6}});
  if (!mac.empty()) j["mac"] = mac;
  if (probe) j["probe"] = true;
  if (!layer_roots.empty()) j["layer_roots"] = layer_roots;
  if (!disks.empty()) j["disks"] = disks;
  if (vsock) j["vsock"] = true;
  return j.dump();
}

}  // namespace sbx::agent
