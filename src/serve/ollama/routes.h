#pragma once
// Ollama's API on the OpenAI server, thin like openai/routes: the bodies come from ollama/schema
// and the generations from the OpenAI service (one path from request to tokens for both APIs).
//   GET /api/version, GET /api/tags, GET /api/ps
//   POST /api/show, POST /api/chat, POST /api/generate
// Answers stream as NDJSON (application/x-ndjson) unless "stream": false; errors are
// {"error": "message"} with the status the OpenAI routes would give.
#include <chrono>
#include <string_view>

#include "serve/openai/service.h"

namespace httplib {
class Server;
}

namespace orchard::serve::ollama {

// `service` must outlive the server. `probe`: how often an answer in progress writes to its
// client when there is nothing new (a space, which JSON allows before a value), to notice a
// client that went away.
void mount_routes(httplib::Server& server, openai::Service& service, std::chrono::milliseconds probe);

// Whether `path` is under Ollama's /api/, whose errors take Ollama's shape.
bool is_ollama_path(std::string_view path);

}  // namespace orchard::serve::ollama
