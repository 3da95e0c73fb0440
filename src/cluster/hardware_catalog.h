#pragma once
// The Apple-silicon catalog shipped in data/hardware_catalog.json, embedded into the binary at
// build time (so `orchard` needs no data directory). ORCHARD_DATA_DIR, when set, points at a
// directory whose hardware_catalog.json replaces the embedded one (for trying edits).
#include <optional>
#include <string>
#include <vector>

#include "cluster/cost_model.h"

namespace orchard::cluster {

struct ChipSpec {
  std::string name;     // "M4 Max"
  std::string family;   // "M4"
  std::string tier;     // base | pro | max | ultra
  int performance_cores = 0;
  int efficiency_cores = 0;
  int gpu_cores_min = 0, gpu_cores_max = 0;
  double memory_bandwidth_gbs = 0;         // 0: unknown
  double memory_bandwidth_gbs_binned = 0;  // the binned part's figure; 0: same or unknown
  std::vector<int> memory_options_gb;
  int thunderbolt = 0;        // 3, 4 or 5
  bool rdma_tb5 = false;      // hardware able to do RDMA over Thunderbolt 5 (needs macOS 26.2+)
  double cpu_gflops = 0;      // estimated CPU matmul rate; 0: unknown
  std::string notes;
};

struct MachineModel {
  std::string name;                // "Mac mini (M4 Pro)"
  std::vector<std::string> chips;  // chip names it ships with
  int thunderbolt_ports = 0;
  std::string notes;
};

class HardwareCatalog {
 public:
  // Parses catalog JSON; throws FormatError "[cluster] hardware catalog: ..." naming the field.
  static HardwareCatalog parse(const std::string& json_text);
  // The embedded catalog (or ORCHARD_DATA_DIR's), parsed once.
  static const HardwareCatalog& builtin();

  const std::vector<ChipSpec>& chips() const { return chips_; }
  const std::vector<MachineModel>& machines() const { return machines_; }
  // Exact name, case-insensitive ("m4 max"); nullptr when unknown.
  const ChipSpec* find(const std::string& name) const;
  // The chip a CPU brand string names ("Apple M4 Max" -> M4 Max); nullptr for non-Apple CPUs.
  const ChipSpec* match_brand(const std::string& brand) const;
  // Like find, but throws Error listing the known names.
  const ChipSpec& chip(const std::string& name) const;

 private:
  std::vector<ChipSpec> chips_;
  std::vector<MachineModel> machines_;
};

// What the cost model assumes for a Mac with this chip: the peak bandwidth (the binned figure
// when `binned`) × kCpuBandwidthEfficiency, and the catalog's CPU estimate. Throws Error when
// the catalog does not know the bandwidth.
MachineSpec machine_from_chip(const ChipSpec& chip, double memory_gb, const std::string& host, bool binned = false);

// The JSON text compiled into the binary (generated from data/hardware_catalog.json).
const char* embedded_hardware_catalog_json();

}  // namespace orchard::cluster
