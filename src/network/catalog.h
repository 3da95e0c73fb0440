#pragma once
// The Apple-silicon hardware catalog (data/hardware_catalog.json, shared with the cluster
// planner), as far as the network needs it: a chip's tier, bandwidth and memory options.
#include <optional>
#include <string>
#include <vector>

#include "network/ledger.h"

namespace orchard::network {

struct ChipInfo {
  std::string name;  // "M2 Ultra"
  ledger::Tier tier = ledger::Tier::Base;
  double memory_bandwidth_gbs = 0;
  std::vector<int> memory_options_gb;
};

class HardwareCatalog {
 public:
  using Chips = std::vector<ChipInfo>;
  // A catalog file of the shape of data/hardware_catalog.json; throws Error/FormatError naming
  // the file when it cannot be read or parsed.
  static HardwareCatalog load(const std::string& path);
  // The catalog built into the binary (cluster::HardwareCatalog::builtin()).
  static HardwareCatalog shipped();
  // Case-insensitive; "Apple M2 Ultra" matches "M2 Ultra".
  std::optional<ChipInfo> find(const std::string& chip) const;
  const std::vector<ChipInfo>& chips() const { return chips_; }

 private:
  Chips chips_;
};

}  // namespace orchard::network
