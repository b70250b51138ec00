// Sandboxes' networks: each sandbox's rules (`network` of the API) and, for those that
// reach out, a slot in sbxd's subnet, kept in its row's network_json beside the rules
// ({"mode", "allow", "deny", "slot", "tx", "rx"}: the last two are bytes of links it no
// longer has). The firewall holds the rules before the link exists; the runtime makes
// the link at start or restore (StartSpec.link), or at once for a live change.
#include "base/log.h"
#include "core/sandbox_manager.h"
#include "net/network.h"

namespace sbx::core {

using nlohmann::json;
using storage::SandboxRecord;

namespace {

json RowNetwork(const SandboxRecord& r) {
  auto j = json::parse(r.network_json, nullptr, false);
  return j.is_object() ? j : json::object();
}

// The rules as the API gave them (a row from before rules had lists has a mode only).
net::Rules RulesOfRow(const json& j) {
  json pub = json::object();
  for (const char* k : {"mode", "allow", "deny"})
    if (j.contains(k)) pub[k] = j[k];
  auto r = net::Rules::FromJson(pub, "none");
  if (r.ok()) return *r;
  net::Rules none;
  none.mode = "none";
  return none;
}

int SlotOfRow(const json& j) { return j.contains("slot") && j["slot"].is_number_integer() ? j["slot"].get<int>() : 0; }

runtime::NetLink RuntimeLink(const net::Network::Link& l, int mbps) {
  runtime::NetLink link{l.host_if, l.sandbox.v4(), l.gateway.v4(), 31};
  link.mbps = mbps;
  if (l.sandbox6 && l.gateway6) {
    link.has_v6 = true;
    link.sandbox6 = l.sandbox6->bytes;
    link.gateway6 = l.gateway6->bytes;
  }
  return link;
}

}  // namespace

Result<net::Rules> SandboxManager::ValidateNetwork(const json& network) const {
  SBX_ASSIGN_OR_RETURN(net::Rules rules, net::Rules::FromJson(network, opts_.default_network));
  if (rules.mode == "outbound" && !network_)
    return MakeError(Code::kFailedPrecondition,
                     "this sbxd runs without networking (its log says why): only network mode \"none\"");
  return rules;
}

int SandboxManager::MbpsOf(const SandboxRecord& r) const {
  auto t = types_.Find(r.type);
  return t.ok() ? t->network_mbps : 0;
}

std::optional<runtime::NetLink> SandboxManager::LinkOfRow(const SandboxRecord& r) const {
  if (!network_) return std::nullopt;
  json j = RowNetwork(r);
  const int slot = SlotOfRow(j);
  if (slot == 0 || RulesOfRow(j).mode != "outbound") return std::nullopt;
  return RuntimeLink(network_->LinkOf(slot), MbpsOf(r));
}

std::optional<runtime::NetLink> SandboxManager::HibernatedLink(const SandboxRecord& r) const {
  json j = RowNetwork(r);
  if (!network_ || !j.value("hibernated_link", false) || SlotOfRow(j) == 0) return std::nullopt;
  return RuntimeLink(network_->LinkOf(SlotOfRow(j)), MbpsOf(r));
}

void SandboxManager::MarkHibernatedLink(SandboxRecord* r, const std::optional<runtime::NetLink>& link) {
  json j = RowNetwork(*r);
  if (link) j["hibernated_link"] = true;
  else j.erase("hibernated_link");
  r->network_json = j.dump();
}

std::string SandboxManager::Nameserver() const {
  return network_ ? network_->resolver_address().ToString() : std::string();
}

Status SandboxManager::PrepareNetwork(SandboxRecord* r) {
  if (!network_) return OkStatus();
  json j = RowNetwork(*r);
  net::Rules rules = RulesOfRow(j);
  int slot = SlotOfRow(j);
  if (rules.mode != "outbound" && slot == 0) return OkStatus();
  const bool took = slot == 0;
  if (took) {
    SBX_ASSIGN_OR_RETURN(slot, network_->Take(r->id));
    j["slot"] = slot;
    r->network_json = j.dump();
  }
  Status st = network_->Apply({slot, rules, MbpsOf(*r)});
  if (!st.ok()) {
    if (took) network_->Release(r->id);  // a slot it held already stays its own
    return st.error().Wrap("setting up the sandbox's network rules");
  }
  return OkStatus();
}

void SandboxManager::ReleaseNetwork(const SandboxRecord& r) {
  if (!network_) return;
  const int slot = SlotOfRow(RowNetwork(r));
  if (slot == 0) return;
  if (Status st = network_->Remove(r.id, slot); !st.ok())
    SBX_LOG(kWarn) << "removing the network rules of " << r.id << ": " << st.error().message;
  network_->Release(r.id);
}

void SandboxManager::KeepLinkBytes(SandboxRecord* r) {
  auto link = LinkOfRow(*r);
  if (!link) return;
  auto c = Rt(*r).ReadLinkCounters(*link);
  if (!c) return;
  json j = RowNetwork(*r);
  j["tx"] = j.value("tx", uint64_t{0}) + c->tx_bytes;
  j["rx"] = j.value("rx", uint64_t{0}) + c->rx_bytes;
  r->network_json = j.dump();
}

std::pair<uint64_t, uint64_t> SandboxManager::NetworkBytes(const Entry& e) const {
  return RowNetworkBytes(e.rec, e.is(State::kRunning) || e.is(State::kPaused));
}

std::pair<uint64_t, uint64_t> SandboxManager::RowNetworkBytes(const SandboxRecord& r, bool linked) const {
  json j = RowNetwork(r);
  uint64_t tx = j.value("tx", uint64_t{0}), rx = j.value("rx", uint64_t{0});
  if (!linked) return {tx, rx};
  if (auto link = LinkOfRow(r))
    if (auto c = Rt(r).ReadLinkCounters(*link)) {
      tx += c->tx_bytes;
      rx += c->rx_bytes;
    }
  return {tx, rx};
}

Status SandboxManager::ClaimNetwork(const SandboxRecord& pooled, const runtime::Instance& inst, SandboxRecord* claimed) {
  json had = RowNetwork(pooled), want = RowNetwork(*claimed);
  if (RulesOfRow(had).ToJson() == RulesOfRow(want).ToJson() && MbpsOf(pooled) == MbpsOf(*claimed)) {
    claimed->network_json = pooled.network_json;
    return OkStatus();
  }
  if (had.contains("slot")) want["slot"] = had["slot"];
  claimed->network_json = want.dump();
  const auto had_link = LinkOfRow(pooled);
  SBX_RETURN_IF_ERROR(PrepareNetwork(claimed));
  const auto link = LinkOfRow(*claimed);
  if (link && !had_link) return Rt(pooled).AttachLink(claimed->id, inst, *link);
  if (!link && had_link) return Rt(pooled).DetachLink(*had_link, false);  // off the create's path
  return OkStatus();
}

void SandboxManager::ForgetRowConnections(const SandboxRecord& r) {
  const int slot = SlotOfRow(RowNetwork(r));
  if (!network_ || slot == 0) return;
  if (Status st = network_->ForgetConnections(slot); !st.ok())
    SBX_LOG(kWarn) << "forgetting the connections of " << r.id << ": " << st.error().message;
}

Status SandboxManager::InstallNetwork() {
  if (!network_) return OkStatus();
  std::vector<net::Network::Entry> entries;
  Lock lock(table_.mu);
  std::vector<EntryPtr> all;
  for (const auto& [id, e] : table_.live()) all.push_back(e);
  for (const auto& [id, e] : table_.deleting()) all.push_back(e);
  for (const auto& e : all) {
    json j = RowNetwork(e->rec);
    const int slot = SlotOfRow(j);
    if (slot == 0) continue;
    if (Status st = network_->Hold(e->rec.id, slot); !st.ok()) {
      SBX_LOG(kError) << "sandbox " << e->rec.id << "'s network: " << st.error().message;
      continue;
    }
    entries.push_back({slot, RulesOfRow(j), MbpsOf(e->rec)});
  }
  return network_->Install(entries);
}

Result<SandboxView> SandboxManager::SetNetwork(const std::string& id, const json& network) {
  SBX_ASSIGN_OR_RETURN(net::Rules rules, ValidateNetwork(network));
  Lock lock(table_.mu);
  SBX_ASSIGN_OR_RETURN(auto e, table_.Find(id));
  SBX_RETURN_IF_ERROR(table_.RequireState(
      *e, {State::kRunning, State::kPaused, State::kStopped, State::kError}));
  SandboxRecord r = e->rec;
  SandboxRecord old = e->rec;
  json j = RowNetwork(r);
  const bool had_link = LinkOfRow(r).has_value();
  const json given = rules.ToJson();
  for (const auto& [k, v] : given.items()) j[k] = v;
  r.network_json = j.dump();
  // The link is there while the sandbox's processes are (running, or frozen in place).
  const bool live = e->is(State::kRunning) || (e->is(State::kPaused) && r.pause_mode == "freeze");
  e->busy = true;
  runtime::Instance inst = e->inst;
  runtime::Runtime& rt = Rt(r);
  table_.mu.Unlock();
  Status st = PrepareNetwork(&r);
  const auto link = LinkOfRow(r);
  if (st.ok() && live && link && !had_link) st = rt.AttachLink(id, inst, *link);
  if (st.ok() && live && !link && had_link) {
    KeepLinkBytes(&old);
    r.network_json = [&] {
      json now = RowNetwork(r);
      json before = RowNetwork(old);
      now["tx"] = before.value("tx", uint64_t{0});
      now["rx"] = before.value("rx", uint64_t{0});
      return now.dump();
    }();
    auto gone = LinkOfRow(old);
    st = rt.DetachLink(*gone);
    if (st.ok()) st = network_->ForgetConnections(SlotOfRow(RowNetwork(old)));
  }
  if (!st.ok()) {
    // Nothing changes: the old rules (and slot) again, a slot taken for this undone.
    if (SlotOfRow(RowNetwork(old)) == 0) ReleaseNetwork(r);
    else (void)network_->Apply({SlotOfRow(RowNetwork(old)), RulesOfRow(RowNetwork(old)), MbpsOf(old)});
  }
  table_.mu.Lock();
  e->busy = false;
  table_.NotifySettled();
  SBX_RETURN_IF_ERROR(st);
  e->rec.network_json = r.network_json;
  SBX_RETURN_IF_ERROR(table_.Persist(*e));
  e->last_active_ms = Now();
  return View(*e);
}

}  // namespace sbx::core
