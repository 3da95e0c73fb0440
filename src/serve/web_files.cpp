#include "serve/web_files.h"

#include <brotli/encode.h>
#include <httplib.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

namespace orchard::serve::web {
namespace {

enum class Encoding { kIdentity, kGzip, kBrotli };

Encoding accepted_encoding(const httplib::Request& req) {
  const core::AcceptedEncodings accepted = core::accepted_encodings(req.get_header_value("Accept-Encoding"));
  return accepted.brotli ? Encoding::kBrotli : accepted.gzip ? Encoding::kGzip : Encoding::kIdentity;
}

// Empty when compression fails or does not make the file smaller.
std::string brotli_bytes(std::string_view bytes, int quality) {
  std::string out(BrotliEncoderMaxCompressedSize(bytes.size()), '\0');
  size_t size = out.size();
  if (out.empty() || !BrotliEncoderCompress(quality, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_TEXT, bytes.size(),
                                            reinterpret_cast<const uint8_t*>(bytes.data()), &size,
                                            reinterpret_cast<uint8_t*>(out.data())))
    return {};
  out.resize(size);
  return out;
}

std::string gzip_bytes(std::string_view bytes, int level) {
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
  if (file.bytes.empty()) {
    res.set_content(std::string(), std::string(file.content_type));
    return;
  }
  // Compressed at build time (web/compress_dist.mjs): nothing is compressed per request.
  const core::EncodedBytes body = core::encoded_for(file, req.get_header_value("Accept-Encoding"));
  if (!body.content_encoding.empty()) res.set_header("Content-Encoding", std::string(body.content_encoding));
  send_as_is(res, body.bytes, nullptr, std::string(file.content_type));
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
