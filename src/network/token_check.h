#pragma once
// What the coordinator can establish by itself about the tokens a node reports for a completion,
// so that a node cannot pad its count (and pay) with ids it did not generate. With the model's
// vocabulary (`orchard network --vocab NAME=FILE.gguf`): the output ids must decode to exactly
// the text the node streamed to the client, nothing may follow an end-of-generation id (generation
// stops there), ids that show no text (control, unused: a real model hardly ever emits one) are
// not counted, and the prompt ids must be the coordinator's own tokenization of the request.
// Without it, the bound is the text's bytes: every id an engine emits adds at least one byte to
// the text, except a final end-of-generation id and a bare leading-space piece.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "model/tokenizer/tokenizer.h"
#include "network/job_request.h"

namespace orchard::network {

struct ModelVocab {
  std::shared_ptr<const model::Tokenizer> tokenizer;
  std::string arch;  // general.architecture: picks the chat template, as a node's engine does
};

// The tokenizer and architecture of a GGUF model file (a vocab-only file will do). Throws
// Error/FormatError naming the file.
ModelVocab load_vocab(const std::string& gguf_path);

// "NAME=PATH" as --vocab takes it: the model name jobs use and its file. Throws Error.
std::pair<std::string, ModelVocab> parse_vocab_flag(const std::string& text);

// The most generated ids a completion's text can stand for, without the vocabulary.
int64_t output_token_bound(const std::string& text);

struct CheckedTokens {
  std::optional<int64_t> prompt;  // the prompt's own token count, when the vocabulary gives one
  int64_t completion = 0;         // the generated tokens to bill and pay
};

// Checks a completion's reported tokens (`result`: "text", "output_ids", "prompt_ids",
// "completion_tokens") against its job's request, with the model's vocabulary when the
// coordinator has one (else nullptr: the byte bound), and counts them. Throws ApiError 400 naming
// the field and what was expected. Counts and ids must already be checked as non-negative 32-bit
// integers.
CheckedTokens check_reported_tokens(const JobRequest& request, const nlohmann::json& result,
                                    const ModelVocab* vocab);

}  // namespace orchard::network
