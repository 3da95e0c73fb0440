#pragma once
// The World page's built files (web/world, bundled by esbuild), embedded into the binary at build
// time by embed_assets.cmake. When node/npm were missing at configure time the table holds a
// single placeholder index.html that says so (`kWorldPageBuilt` is false).
#include <cstddef>
#include <span>
#include <string_view>

namespace orchard::network::world {

struct Asset {
  std::string_view path;          // relative to the bundle: "index.html", "assets/world-3FJ2K.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view etag;          // quoted content hash, for If-None-Match
  std::string_view bytes;
};

// Every embedded file; index.html is always present.
std::span<const Asset> world_assets();
extern const bool kWorldPageBuilt;

}  // namespace orchard::network::world
