#pragma once
// Serving a web page embedded into the binary (core/embedded_file.h): the World page and the chat
// page share how their files are found and sent.
#include <span>
#include <string_view>

#include "core/embedded_file.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace orchard::serve::web {

// The file at `path` ("index.html", "assets/chat-X2.js"); nullptr when there is none.
const core::EmbeddedFile* find_file(std::span<const core::EmbeddedFile> files, std::string_view path);

// Sends `file`: content-hashed assets/ files cached for a year, others revalidated (ETag, 304 for
// a matching If-None-Match); a Content-Security-Policy that lets the page talk to its own origin
// only, so it can fetch nothing from elsewhere.
void send_file(const httplib::Request& req, httplib::Response& res, const core::EmbeddedFile& file);

// Sends a generated body (a JSON answer) compressed at a fast setting when the request accepts
// it and the body is large enough to gain: cpp-httplib would compress it at Brotli's slowest
// quality, which costs more than the World's indexed queries themselves.
void send_compressed(const httplib::Request& req, httplib::Response& res, std::string body,
                     const std::string& content_type);

}  // namespace orchard::serve::web
