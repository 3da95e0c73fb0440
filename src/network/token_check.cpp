#include "network/token_check.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "model/gguf/reader.h"
#include "network/coordinator.h"
#include "network/job_request.h"

namespace orchard::network {

using nlohmann::json;

namespace {

ApiError bad(const std::string& what) { return ApiError(400, "[network] a job's result needs " + what); }

// Kinds of token that decode to no text.
bool shows_nothing(model::TokenKind kind) {
  return kind == model::TokenKind::Control || kind == model::TokenKind::Unused;
}

void check_completion_bound(const std::string& text, int64_t completion) {
  if (completion > output_token_bound(text))
    throw bad(fmt::format("at most {} generated tokens for its {} bytes of \"text\" (each token shows at least one), not {}",
                          output_token_bound(text), text.size(), completion));
}

}  // namespace

ModelVocab load_vocab(const std::string& gguf_path) {
  auto file = model::gguf::Reader::open(gguf_path);
  ModelVocab v;
  v.tokenizer = std::make_shared<const model::Tokenizer>(model::Tokenizer::from_gguf(file));
  v.arch = file.get("general.architecture").as_string("general.architecture");
  return v;
}

std::pair<std::string, ModelVocab> parse_vocab_flag(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error(error_message("network", "--vocab takes MODEL=FILE.gguf (the name jobs use, then its file), not '{}'", text));
  return {text.substr(0, eq), load_vocab(text.substr(eq + 1))};
}

int64_t output_token_bound(const std::string& text) {
  // One end-of-generation id, and one SentencePiece "▁" whose space the decoder drops at the start.
  return static_cast<int64_t>(text.size()) + 2;
}

CheckedTokens check_reported_tokens(const JobRequest& request, const json& result, const ModelVocab* vocab) {
  const std::string text = result.value("text", "");
  const bool has_ids = result.contains("output_ids");
  CheckedTokens checked;
  checked.completion =
      has_ids ? static_cast<int64_t>(result["output_ids"].size()) : result.value("completion_tokens", int64_t{0});
  check_completion_bound(text, checked.completion);
  if (!vocab) return checked;
  const model::Tokenizer& tok = *vocab->tokenizer;
  const std::vector<model::TokenId> own_prompt = prompt_tokens(tok, vocab->arch, request);
  checked.prompt = static_cast<int64_t>(own_prompt.size());
  if (!has_ids) return checked;  // an engine that cannot tell its ids: its claims, bounded

  const auto ids = result["output_ids"].get<std::vector<int64_t>>();
  model::Tokenizer::StreamDecoder decoder(tok);
  std::string decoded;
  checked.completion = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= tok.vocab_size())
      throw bad(fmt::format("\"output_ids\" within the model's vocabulary of {}, not {}", tok.vocab_size(), ids[i]));
    const auto id = static_cast<model::TokenId>(ids[i]);
    if (tok.is_end_of_generation(id)) {
      if (i + 1 != ids.size())
        throw bad(fmt::format("\"output_ids\" that end at their end-of-generation id ({} at {}), not {} more", id, i,
                              ids.size() - i - 1));
      ++checked.completion;
      continue;
    }
    // An id that shows no text adds nothing the client saw: kept for the decoding, not paid.
    if (!shows_nothing(tok.token_kind(id))) ++checked.completion;
    decoded += decoder.push(id);
  }
  decoded += decoder.finish();
  if (decoded != text)
    throw bad(fmt::format("\"output_ids\" that decode to its \"text\": its {} ids give {} bytes where the text has {}",
                          ids.size(), decoded.size(), text.size()));
  if (result.contains("prompt_ids") && checked.prompt) {
    const auto prompt = result["prompt_ids"].get<std::vector<int64_t>>();
    if (prompt != std::vector<int64_t>(own_prompt.begin(), own_prompt.end()))
      throw bad(fmt::format("\"prompt_ids\" that are the request's own {} tokens, not {} others", own_prompt.size(),
                            prompt.size()));
  }
  return checked;
}

}  // namespace orchard::network
