#pragma once
// The World page's built files (web/world, bundled by esbuild), embedded into the binary at build
// time (cmake/web_page.cmake). When node/npm were missing at configure time the table holds a
// single placeholder index.html that says so (`kWorldPageBuilt` is false).
#include <span>

#include "core/embedded_file.h"

namespace orchard::network::world {

using Asset = core::EmbeddedFile;

// Every embedded file; index.html is always present.
std::span<const Asset> world_assets();
extern const bool kWorldPageBuilt;

}  // namespace orchard::network::world
