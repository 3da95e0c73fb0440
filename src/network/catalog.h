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
  // Throws Error naming the file when it cannot be read or lacks "chips".
  static HardwareCatalog load(const std::string& path);
  // The catalog shipped in the source tree (ORCHARD_DATA_DIR), or an empty one if absent.
  static HardwareCatalog shipped();
  // Case-insensitive; "Apple M2 Ultra" matches "M2 Ultra".
  std::optional<ChipInfo> find(const std::string& chip) const;
  const std::vector<ChipInfo>& chips() const { return chips_; }

 private:
  std::vector<ChipInfo> chips_;
};

std::string shipped_data_path(const std::string& file);  // ORCHARD_DATA_DIR/file

}  // namespace orchard::network
