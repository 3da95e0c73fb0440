#include "network/catalog.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace orchard::network {

std::string shipped_data_path(const std::string& file) { return std::string(ORCHARD_DATA_DIR) + "/" + file; }

HardwareCatalog HardwareCatalog::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(error_message("network", "cannot read hardware catalog {}", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw FormatError(error_message("network", "{}: {}", path, e.what()));
  }
  if (!j.contains("chips")) throw FormatError(error_message("network", "{}: no \"chips\" list", path));
  HardwareCatalog c;
  for (const auto& chip : j["chips"]) {
    ChipInfo info;
    info.name = chip.value("name", "");
    info.tier = ledger::parse_tier(chip.value("tier", "base"));
    if (chip.contains("memory_bandwidth_gbs") && chip["memory_bandwidth_gbs"].is_number())
      info.memory_bandwidth_gbs = chip["memory_bandwidth_gbs"].get<double>();
    if (chip.contains("memory_options_gb")) info.memory_options_gb = chip["memory_options_gb"].get<std::vector<int>>();
    c.chips_.push_back(std::move(info));
  }
  return c;
}

HardwareCatalog HardwareCatalog::shipped() {
  std::string path = shipped_data_path("hardware_catalog.json");
  return std::filesystem::exists(path) ? load(path) : HardwareCatalog{};
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
