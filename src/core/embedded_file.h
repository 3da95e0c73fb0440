#pragma once
// A file of a web page built at build time and embedded into the binary (cmake/web_page.cmake
// writes the tables: the World page's, the chat page's, the cluster page's).
#include <span>
#include <string_view>

namespace orchard::core {

struct EmbeddedFile {
  std::string_view path;          // relative to the bundle: "index.html", "assets/world-3FJ2K.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view etag;          // quoted content hash, for If-None-Match
  std::string_view bytes;
};

// The file at `path` ("index.html", "assets/chat-X2.js"); nullptr when there is none.
inline const EmbeddedFile* find_embedded_file(std::span<const EmbeddedFile> files, std::string_view path) {
  for (const EmbeddedFile& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

// The Content-Security-Policy every embedded page is sent with: no CDN, no fonts, no trackers, a
// browser-enforced rule that the page talks to its own origin only. data: images are for inline
// SVG favicons.
inline constexpr std::string_view kEmbeddedPageCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace orchard::core
