#include "cluster/hardware_catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace orchard::cluster {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

template <typename T>
T field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw FormatError(error_message("cluster", "hardware catalog: {} has no '{}'", where, key));
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    throw FormatError(error_message("cluster", "hardware catalog: {}.{}: {}", where, key, e.what()));
  }
}

// null in the catalog means "unknown", kept as 0.
double number_or_zero(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? 0.0 : it->get<double>();
}

ChipSpec parse_chip(const json& j) {
  ChipSpec c;
  c.name = field<std::string>(j, "name", "chip");
  const std::string where = "chip '" + c.name + "'";
  c.family = field<std::string>(j, "family", where);
  c.tier = field<std::string>(j, "tier", where);
  if (c.tier != "base" && c.tier != "pro" && c.tier != "max" && c.tier != "ultra")
    throw FormatError(error_message("cluster", "hardware catalog: {} has tier '{}' (base, pro, max, ultra)", where, c.tier));
  c.performance_cores = field<int>(j, "performance_cores", where);
  c.efficiency_cores = field<int>(j, "efficiency_cores", where);
  auto gpu = field<std::vector<int>>(j, "gpu_cores", where);
  if (gpu.size() != 2) throw FormatError(error_message("cluster", "hardware catalog: {} gpu_cores is not [min, max]", where));
  c.gpu_cores_min = gpu[0];
  c.gpu_cores_max = gpu[1];
  c.memory_bandwidth_gbs = number_or_zero(j, "memory_bandwidth_gbs");
  c.memory_bandwidth_gbs_binned = number_or_zero(j, "memory_bandwidth_gbs_binned");
  c.memory_options_gb = field<std::vector<int>>(j, "memory_options_gb", where);
  c.thunderbolt = field<int>(j, "thunderbolt", where);
  c.rdma_tb5 = field<bool>(j, "rdma_tb5", where);
  if (c.rdma_tb5 && c.thunderbolt < 5)
    throw FormatError(error_message("cluster", "hardware catalog: {} claims RDMA over Thunderbolt 5 with Thunderbolt {}", where, c.thunderbolt));
  c.cpu_gflops = number_or_zero(j, "cpu_gflops_estimate");
  c.notes = j.value("notes", "");
  return c;
}

}  // namespace

HardwareCatalog HardwareCatalog::parse(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw FormatError(error_message("cluster", "hardware catalog is not JSON: {}", e.what()));
  }
  HardwareCatalog catalog;
  for (const json& c : field<std::vector<json>>(j, "chips", "catalog")) catalog.chips_.push_back(parse_chip(c));
  for (const json& m : j.value("machines", std::vector<json>{})) {
    MachineModel machine;
    machine.name = field<std::string>(m, "name", "machine");
    machine.chips = field<std::vector<std::string>>(m, "chips", "machine '" + machine.name + "'");
    for (const std::string& chip : machine.chips)
      if (!catalog.find(chip))
        throw FormatError(error_message("cluster", "hardware catalog: machine '{}' names unknown chip '{}'", machine.name, chip));
    machine.thunderbolt_ports = m.value("thunderbolt_ports", 0);
    machine.notes = m.value("notes", "");
    catalog.machines_.push_back(std::move(machine));
  }
  return catalog;
}

const HardwareCatalog& HardwareCatalog::builtin() {
  static const HardwareCatalog catalog = [] {
    if (const char* dir = std::getenv("ORCHARD_DATA_DIR"); dir && *dir) {
      const std::string path = std::string(dir) + "/hardware_catalog.json";
      std::ifstream in(path);
      if (!in) throw Error(error_message("cluster", "ORCHARD_DATA_DIR is set but {} cannot be read", path));
      std::ostringstream text;
      text << in.rdbuf();
      return parse(text.str());
    }
    return parse(embedded_hardware_catalog_json());
  }();
  return catalog;
}

const ChipSpec* HardwareCatalog::find(const std::string& name) const {
  const std::string wanted = lower(name);
  for (const ChipSpec& c : chips_)
    if (lower(c.name) == wanted) return &c;
  return nullptr;
}

const ChipSpec* HardwareCatalog::match_brand(const std::string& brand) const {
  // The longest name wins so "Apple M4 Max" is not taken for "M4".
  const std::string text = lower(brand);
  const ChipSpec* best = nullptr;
  for (const ChipSpec& c : chips_) {
    const std::string name = lower(c.name);
    const size_t at = text.find(name);
    if (at == std::string::npos) continue;
    const size_t end = at + name.size();
    if (end < text.size() && std::isalnum(static_cast<unsigned char>(text[end]))) continue;
    if (!best || c.name.size() > best->name.size()) best = &c;
  }
  return best;
}

const ChipSpec& HardwareCatalog::chip(const std::string& name) const {
  if (const ChipSpec* c = find(name)) return *c;
  std::string known;
  for (const ChipSpec& c : chips_) known += (known.empty() ? "" : ", ") + c.name;
  throw Error(error_message("cluster", "unknown chip '{}' (known: {})", name, known));
}

MachineSpec machine_from_chip(const ChipSpec& chip, double memory_gb, const std::string& host, bool binned) {
  const double peak = binned && chip.memory_bandwidth_gbs_binned > 0 ? chip.memory_bandwidth_gbs_binned : chip.memory_bandwidth_gbs;
  if (peak <= 0 || chip.cpu_gflops <= 0)
    throw Error(error_message("cluster", "the catalog does not know the memory bandwidth or compute rate of {}: give "
                              "--memory-bw-gbs and --compute-gflops", chip.name));
  return {host, memory_gb, peak * kCpuBandwidthEfficiency, chip.cpu_gflops};
}

}  // namespace orchard::cluster
