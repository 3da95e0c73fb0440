#pragma once
// What both HTTP servers on cpp-httplib (`orchard serve` and the network coordinator) need beyond
// its defaults, written once.
#include <httplib.h>

#include <string>

namespace orchard::serve::http {

// Registers a POST route that reads its body in full (up to the server's payload limit) whatever
// Content-Type it claims, so handlers judge a body by its content (JSON): httplib by itself refuses
// a form-encoded body over 8 KiB as too large, and curl -d sends JSON as form-encoded. A multipart
// body gets 415.
void post(httplib::Server& server, const std::string& pattern, httplib::Server::Handler handler);

}  // namespace orchard::serve::http
