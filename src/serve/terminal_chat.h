#pragma once
// The conversation of `orchard chat`, on any engine (the whole model, rank 0 of a split, or a
// test's scripted one): each line read is a user turn, sent through the server's own request
// path (openai::Service on a one-slot scheduler), so the prompt is the model's chat template over
// the whole history, exactly as `orchard serve` renders it, and stopping a reply is the
// scheduler's cancellation.
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "model/sampler.h"
#include "serve/chat_templates.h"
#include "serve/engine.h"

namespace orchard::serve {

struct TerminalChatOptions {
  model::SamplerOptions sampling;  // its seed is used as given
  int32_t max_tokens = 0;          // per reply; 0: the rest of the context
  std::string system;              // a system message opening the conversation
  // A reasoning model's thinking (a <think> block, Harmony's analysis channel) is shown before
  // the reply, between "Thinking..." and "...done thinking." as ollama's CLI shows it; false:
  // left out. Either way it stays out of the history, as the templates expect.
  bool show_thinking = true;
  bool prompts = false;  // a person types (stdin is a terminal): a greeting and ">>> " prompts
  bool dim = false;      // the output is a terminal: the thinking is dimmed
  bool verbose = false;  // after each reply its prompt and reply token counts and speed, on `err`
};

// Reads turns from `in` until its end, /exit or /bye; /clear forgets the conversation. Replies
// go to `out` as they are written, everything else to `err`. `interrupted` (set by the caller's
// Ctrl-C handler) stops the reply being written, whose text then stays in the history.
void converse(Engine& engine, ChatFamily family, const TerminalChatOptions& options, std::istream& in, std::ostream& out,
              std::ostream& err, std::atomic<bool>& interrupted);

}  // namespace orchard::serve
