#include "network/catalog.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "cluster/hardware_catalog.h"
#include "core/error.h"

namespace orchard::network {

namespace {

// The network needs only a chip's tier, bandwidth and memory options of the catalog the
// cluster layer parses (and embeds into the binary).
HardwareCatalog::Chips chips_of(const cluster::HardwareCatalog& catalog) {
  HardwareCatalog::Chips chips;
  for (const cluster::ChipSpec& spec : catalog.chips()) {
    ChipInfo info;
    info.name = spec.name;
    info.tier = ledger::parse_tier(spec.tier.empty() ? "base" : spec.tier);
    info.memory_bandwidth_gbs = spec.memory_bandwidth_gbs;
    info.memory_options_gb = spec.memory_options_gb;
    chips.push_back(std::move(info));
  }
  return chips;
}

}  // namespace

HardwareCatalog HardwareCatalog::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(error_message("network", "cannot read hardware catalog {}", path));
  std::stringstream text;
  text << in.rdbuf();
  HardwareCatalog c;
  c.chips_ = chips_of(cluster::HardwareCatalog::parse(text.str()));
  return c;
}

HardwareCatalog HardwareCatalog::shipped() {
  HardwareCatalog c;
  c.chips_ = chips_of(cluster::HardwareCatalog::builtin());
  return c;
}

std::optional<ChipInfo> HardwareCatalog::find(const std::string& chip) const {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return s;
  };
  std::string want = lower(chip);
  if (want.starts_with("apple ")) want = want.substr(6);
  for (const ChipInfo& c : chips_)
    if (lower(c.name) == want) return c;
  return std::nullopt;
}

}  // namespace orchard::network
