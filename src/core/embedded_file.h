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
  std::string_view brotli;  // the bytes compressed at build time; empty when that was not smaller
  std::string_view gzip;
};

// What a request's Accept-Encoding header (RFC 9110: names with optional ;q=, 0 refusing one)
// accepts of the encodings Orchard sends.
struct AcceptedEncodings {
  bool brotli = false;
  bool gzip = false;
};
AcceptedEncodings accepted_encodings(std::string_view accept_encoding);

// The form of `file` to send for that header: its Brotli bytes where accepted, else its gzip
// bytes, else the bytes as they are (content_encoding "").
struct EncodedBytes {
  std::string_view bytes;
  std::string_view content_encoding;  // "br", "gzip" or ""
};
EncodedBytes encoded_for(const EmbeddedFile& file, std::string_view accept_encoding);

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
