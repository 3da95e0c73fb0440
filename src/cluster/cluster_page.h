#pragma once
// The cluster page every agent answers at / on its TCP port (web/cluster, bundled by esbuild and
// embedded at build time by cmake/web_page.cmake): the machines, the links and a chosen model's
// plan, refreshed from GET /cluster. Without node/npm at configure time the table holds a
// placeholder index.html that says the page was not built (kClusterPageBuilt false).
#include <span>

#include "core/embedded_file.h"

namespace orchard::cluster {

std::span<const core::EmbeddedFile> cluster_page_files();
extern const bool kClusterPageBuilt;

}  // namespace orchard::cluster
