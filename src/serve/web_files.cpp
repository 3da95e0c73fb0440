#include "serve/web_files.h"

#include <brotli/encode.h>
#include <httplib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace orchard::serve::web {
namespace {

enum class Encoding { kIdentity, kGzip, kBrotli };

// The best encoding the request accepts (RFC 9110 Accept-Encoding: names with optional ;q=, 0
// refusing one), Brotli before gzip.
Encoding accepted_encoding(const httplib::Request& req) {
  const std::string header = req.get_header_value("Accept-Encoding");
  bool brotli = false, gzip = false;
  for (size_t begin = 0; begin <= header.size();) {
    size_t end = header.find(',', begin);
    if (end == std::string::npos) end = header.size();
    std::string item = header.substr(begin, end - begin);
    begin = end + 1;
    const size_t semicolon = item.find(';');
    std::string name = item.substr(0, semicolon);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    bool refused = false;
    if (semicolon != std::string::npos) {
      const size_t q = item.find("q=", semicolon);
      refused = q != std::string::npos && std::strtod(item.c_str() + q + 2, nullptr) <= 0.0;
    }
    if (refused) continue;
    if (name == "br") brotli = true;
    if (name == "gzip" || name == "x-gzip") gzip = true;
  }
  return brotli ? Encoding::kBrotli : gzip ? Encoding::kGzip : Encoding::kIdentity;
}

// Empty when compression fails or does not make the file smaller.
std::string brotli_bytes(std::string_view bytes, int quality = BROTLI_MAX_QUALITY) {
  std::string out(BrotliEncoderMaxCompressedSize(bytes.size()), '\0');
  size_t size = out.size();
  if (out.empty() || !BrotliEncoderCompress(quality, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_TEXT, bytes.size(),
                                            reinterpret_cast<const uint8_t*>(bytes.data()), &size,
                                            reinterpret_cast<uint8_t*>(out.data())))
    return {};
  out.resize(size);
  return out;
}

std::string gzip_bytes(std::string_view bytes, int level = Z_BEST_COMPRESSION) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer rather than zlib's.
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const bool done = deflate(&z, Z_FINISH) == Z_STREAM_END;
  out.resize(z.total_out);
  deflateEnd(&z);
  return done ? out : std::string();
}

// An embedded file's bytes in `encoding`, compressed once per file and encoding at its first
// request and kept: cpp-httplib would otherwise compress every response anew, at Brotli's
// highest quality, which took the World page's 250 KB bundle about half a second of a core per
// visit (several seconds on a loaded host, most of the page's load time). Null: send it as is.
std::shared_ptr<const std::string> encoded(const core::EmbeddedFile& file, Encoding encoding) {
  static std::mutex mutex;
  static std::map<std::pair<const char*, Encoding>, std::shared_ptr<const std::string>> cache;
  const std::lock_guard lock(mutex);
  auto [it, fresh] = cache.try_emplace({file.bytes.data(), encoding});
  if (fresh) {
    std::string bytes = encoding == Encoding::kBrotli ? brotli_bytes(file.bytes) : gzip_bytes(file.bytes);
    if (!bytes.empty() && bytes.size() < file.bytes.size()) it->second = std::make_shared<const std::string>(std::move(bytes));
  }
  return it->second;
}

// Sends `bytes` (kept alive by `owner`) through a provider of known length, which cpp-httplib
// sends as it is: it compresses only bodies set whole and chunked providers.
void send_as_is(httplib::Response& res, std::string_view bytes, std::shared_ptr<const std::string> owner,
                const std::string& content_type) {
  res.set_content_provider(bytes.size(), content_type,
                           [bytes, owner](size_t offset, size_t length, httplib::DataSink& sink) {
                             return sink.write(bytes.data() + offset, std::min(length, bytes.size() - offset));
                           });
}

}  // namespace

const core::EmbeddedFile* find_file(std::span<const core::EmbeddedFile> files, std::string_view path) {
  return core::find_embedded_file(files, path);
}

void send_file(const httplib::Request& req, httplib::Response& res, const core::EmbeddedFile& file) {
  const bool hashed = file.path.starts_with("assets/");
  res.set_header("Cache-Control", hashed ? "public, max-age=31536000, immutable" : "no-cache");
  res.set_header("ETag", std::string(file.etag));
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", std::string(core::kEmbeddedPageCsp));
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Vary", "Accept-Encoding");
  if (req.get_header_value("If-None-Match") == file.etag) {
    res.status = 304;
    return;
  }
  const Encoding encoding = accepted_encoding(req);
  std::shared_ptr<const std::string> body = encoding == Encoding::kIdentity ? nullptr : encoded(file, encoding);
  if (file.bytes.empty()) {
    res.set_content(std::string(), std::string(file.content_type));
    return;
  }
  std::string_view bytes = file.bytes;
  if (body) {
    res.set_header("Content-Encoding", encoding == Encoding::kBrotli ? "br" : "gzip");
    bytes = *body;
  }
  send_as_is(res, bytes, std::move(body), std::string(file.content_type));
}

void send_compressed(const httplib::Request& req, httplib::Response& res, std::string body,
                     const std::string& content_type) {
  // Below a kilobyte the headers outweigh what compression saves.
  constexpr size_t kWorthCompressing = 1024;
  // Brotli 5 and gzip 6 compress JSON at tens of MB/s to within ~15% of their best.
  constexpr int kFastBrotli = 5, kFastGzip = 6;
  const Encoding encoding = body.size() < kWorthCompressing ? Encoding::kIdentity : accepted_encoding(req);
  std::string packed = encoding == Encoding::kBrotli ? brotli_bytes(body, kFastBrotli)
                       : encoding == Encoding::kGzip ? gzip_bytes(body, kFastGzip)
                                                     : std::string();
  res.set_header("Vary", "Accept-Encoding");
  if (!packed.empty() && packed.size() < body.size()) {
    res.set_header("Content-Encoding", encoding == Encoding::kBrotli ? "br" : "gzip");
    body = std::move(packed);
  }
  if (body.empty()) {
    res.set_content(std::string(), content_type);
    return;
  }
  auto kept = std::make_shared<const std::string>(std::move(body));
  send_as_is(res, *kept, kept, content_type);
}

}  // namespace orchard::serve::web
