#pragma once
// Ollama's API JSON, written once: parsing /api/chat and /api/generate bodies into the request the
// OpenAI service already runs (openai::ApiRequest: one path from request to generation for both
// APIs), and every body and NDJSON line the Ollama routes send. No HTTP here.
//
// Ollama's conventions kept: answers stream as newline-delimited JSON unless "stream": false;
// sampling comes in "options" with Ollama's defaults (temperature 0.8, top_k 40, top_p 0.9,
// min_p 0, repeat_penalty 1.1 over the last 64 tokens, a random seed); num_predict ≤ 0 means no
// limit but the context; durations are nanoseconds; errors are {"error": "message"}.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "serve/chat_templates.h"
#include "serve/engine.h"
#include "serve/openai/schema.h"
#include "serve/scheduler.h"

namespace orchard::serve::ollama {

enum class Route { Chat, Generate };

struct Request {
  openai::ApiRequest generation;  // what to generate; endpoint Completions for raw prompts
  // No prompt (generate) or no messages (chat): Ollama's way of asking to load the model, which
  // is answered at once with done_reason "load".
  bool load_only = false;
};

// Parses a body of /api/chat or /api/generate. "model" is required (a name with the ":latest"
// tag matches the name without it). /api/generate renders "prompt" (and "system") with the chat
// template unless "raw" is true. "format" ("json" or a JSON schema) constrains the output as
// OpenAI's response_format does; /api/chat takes "tools" in OpenAI's shape (the model decides
// whether to call: Ollama has no tool_choice), assistant turns' "tool_calls" and "tool" turns.
// "think": false leaves the model's reasoning out of the answer (and asks a model whose template
// can skip thinking, Qwen3's, not to think); true, or absent, returns it; "low", "medium" or
// "high" is gpt-oss's reasoning effort.
// Throws openai::ApiError 400 naming the field for bad JSON, wrong types, values out of range,
// a schema keyword the grammar can't honour, non-empty "images", "suffix", "template" or
// "context", which this server can't honour.
Request parse_request(Route route, std::string_view body);
// The model a /api/show body names ("model", or the older "name"), without the ":latest" tag.
std::string parse_show_request(std::string_view body);
// The name Ollama clients see: the id with ":latest" unless it has a tag.
std::string model_name(const ModelInfo& info);

// {"error": "message"}
std::string error_body(std::string_view message);

// Now in RFC 3339 with nanoseconds, as Ollama's created_at.
std::string timestamp_now();

// The NDJSON lines of an answer (each ends in '\n'); the same last line is a whole answer's body.
// Each line's created_at is the time it was written, as Ollama's.
struct Answer {
  Route route = Route::Chat;
  std::string model;  // model_name()
};
// A streamed piece of the reply: done false; with calls, the message carries them as Ollama's
// tool_calls ([{"function": {"index", "name", "arguments": {...}}}]); reasoning is the chat
// message's "thinking", or generate's top-level "thinking" (absent when empty).
std::string chunk_line(const Answer& answer, std::string_view text, std::span<const ChatToolCall> calls = {},
                       std::string_view thinking = {});
// The last line: done true, done_reason, the counts and durations (total_ns from the request's
// start; the load duration is 0: the model was loaded when the server started). `text` is the
// whole reply for a whole answer, empty after streamed chunks.
std::string final_line(const Answer& answer, std::string_view text, FinishReason reason, const Usage& usage, int64_t total_ns,
                       std::span<const ChatToolCall> calls = {}, std::string_view thinking = {});
// The answer to a load-only request: done, done_reason "load", no text.
std::string load_line(const Answer& answer);

std::string version_body();
// GET /api/tags: the one model, with its size, family and quantization.
std::string tags_body(const ModelInfo& info);
// POST /api/show: details, model_info (the file's scalar metadata), the template family.
std::string show_body(const ModelInfo& info, ChatFamily family, int32_t n_ctx);
// GET /api/ps: the one model, loaded for as long as the server runs.
std::string ps_body(const ModelInfo& info);

}  // namespace orchard::serve::ollama
