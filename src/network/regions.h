#pragma once
// The coarse places a node may say it is in: the cities and countries of data/regions.json,
// built into the binary. Anything else is never stored or shown, so a node cannot publish a
// precise location.
#include <string>
#include <string_view>

namespace orchard::network {

const char* embedded_regions_json();  // data/regions.json, generated at build time

// The list's spelling of `region` when it is on the list (case-insensitive), else "".
std::string listed_region(std::string_view region);

}  // namespace orchard::network
