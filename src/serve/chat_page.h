#pragma once
// The chat page `orchard serve` answers at / (web/chat, bundled by esbuild and embedded at build
// time by cmake/web_page.cmake): a model picker, streamed replies from /v1/chat/completions, a stop
// button, the conversation kept in the browser. Without node/npm at configure time the table holds
// a placeholder index.html that says the page was not built (kChatPageBuilt false).
#include <span>
#include <string_view>

#include "core/embedded_file.h"

namespace httplib {
class Server;
}

namespace orchard::serve {

std::span<const core::EmbeddedFile> chat_page_files();
extern const bool kChatPageBuilt;

// GET / and /chat: the page; GET /chat/assets/<file>: its scripts and styles. HEAD / answers 200,
// which Ollama clients use to see that a server is up.
void mount_chat_page(httplib::Server& server);

// Whether `path` is one of the page's files, which need no API key (the page asks for one when
// the API wants it).
bool is_chat_page_path(std::string_view path);

}  // namespace orchard::serve
