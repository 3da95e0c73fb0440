#include "network/regions.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace orchard::network {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

const std::vector<std::string>& region_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : nlohmann::json::parse(embedded_regions_json())) out.push_back(entry.at("name"));
    return out;
  }();
  return names;
}

}  // namespace

std::string listed_region(std::string_view region) {
  const std::string wanted = lower(region);
  for (const std::string& name : region_names())
    if (lower(name) == wanted) return name;
  return {};
}

}  // namespace orchard::network
