// The tokenizer.ggml.* keys: reading them into a Tokenizer and writing a built vocabulary. Kept
// apart from the algorithms so the key names live in one place.
#include <limits>

#include "core/error.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab_builder.h"

namespace orchard::model {
namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) { return std::string(kPrefix) + std::string(name); }

std::optional<TokenId> read_id(const gguf::Reader& file, std::string_view name) {
  const std::string k = key(name);
  const gguf::Value* value = file.find(k);
  if (value == nullptr) return std::nullopt;
  const uint64_t id = value->as_uint(k);
  if (id > static_cast<uint64_t>(std::numeric_limits<TokenId>::max())) {
    throw FormatError(error_message("tokenizer", "{}: {} is {}, not a token id", file.path(), k, id));
  }
  return static_cast<TokenId>(id);
}

std::optional<bool> read_bool(const gguf::Reader& file, std::string_view name) {
  const std::string k = key(name);
  const gguf::Value* value = file.find(k);
  if (value == nullptr) return std::nullopt;
  return value->as_bool(k);
}

TokenKind to_kind(int64_t code, size_t index, const gguf::Reader& file) {
  // 0 is "undefined" in llama.cpp's enum; such tokens behave as normal ones.
  if (code == 0) return TokenKind::Normal;
  if (code < static_cast<int64_t>(TokenKind::Normal) || code > static_cast<int64_t>(TokenKind::Byte)) {
    throw FormatError(error_message("tokenizer", "{}: tokenizer.ggml.token_type[{}] is {}, not a token type (1-6)", file.path(), index, code));
  }
  return static_cast<TokenKind>(code);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::Reader& file) {
  VocabData vocab;
  const std::string model_key = key("model");
  vocab.model = file.get(model_key).as_string(model_key);
  if (const gguf::Value* pre = file.find(key("pre"))) vocab.pre = pre->as_string(key("pre"));

  const std::string tokens_key = key("tokens");
  const gguf::Array& tokens = file.get(tokens_key).as_array(tokens_key);
  vocab.tokens.reserve(tokens.items.size());
  for (const gguf::Value& token : tokens.items) vocab.tokens.push_back(token.as_string(tokens_key));
  if (const gguf::Value* scores = file.find(key("scores"))) {
    const std::string k = key("scores");
    for (const gguf::Value& score : scores->as_array(k).items) vocab.scores.push_back(static_cast<float>(score.as_float(k)));
  }
  if (const gguf::Value* types = file.find(key("token_type"))) {
    const std::string k = key("token_type");
    const auto& items = types->as_array(k).items;
    vocab.kinds.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) vocab.kinds.push_back(to_kind(items[i].as_int(k), i, file));
  }
  if (const gguf::Value* merges = file.find(key("merges"))) {
    const std::string k = key("merges");
    for (const gguf::Value& merge : merges->as_array(k).items) vocab.merges.push_back(merge.as_string(k));
  } else if (vocab.model == "gpt2") {
    throw FormatError(error_message("tokenizer", "{}: byte-level BPE vocabulary without {}", file.path(), key("merges")));
  }

  // llama.cpp's defaults for SentencePiece vocabularies that omit the ids.
  const bool spm = vocab.model == "llama";
  const TokenId n = static_cast<TokenId>(std::min<size_t>(vocab.tokens.size(), std::numeric_limits<TokenId>::max()));
  const auto fallback = [&](TokenId id) { return spm && id < n ? id : -1; };
  vocab.bos = read_id(file, "bos_token_id").value_or(fallback(1));
  vocab.eos = read_id(file, "eos_token_id").value_or(fallback(2));
  vocab.unknown = read_id(file, "unknown_token_id").value_or(fallback(0));
  vocab.padding = read_id(file, "padding_token_id").value_or(-1);
  vocab.eot = read_id(file, "eot_token_id").value_or(-1);
  vocab.add_bos = read_bool(file, "add_bos_token");
  vocab.add_eos = read_bool(file, "add_eos_token").value_or(false);
  vocab.add_space_prefix = read_bool(file, "add_space_prefix").value_or(true);
  try {
    return from_vocab(std::move(vocab));
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{} (in {})", e.what(), file.path()));
  }
}

void write_vocab(gguf::Writer& writer, VocabStyle style, int32_t vocab_size) {
  using gguf::Value;
  using gguf::ValueType;
  const VocabData vocab = build_vocab(style, vocab_size);
  writer.set(key("model"), Value::string(vocab.model));
  writer.set(key("pre"), Value::string(vocab.pre));
  std::vector<Value> tokens, scores, kinds;
  tokens.reserve(vocab.tokens.size());
  kinds.reserve(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    tokens.push_back(Value::string(vocab.tokens[i]));
    kinds.push_back(Value::i32(static_cast<int32_t>(vocab.kinds[i])));
  }
  writer.set(key("tokens"), Value::array(ValueType::STRING, std::move(tokens)));
  if (!vocab.scores.empty()) {
    scores.reserve(vocab.scores.size());
    for (float score : vocab.scores) scores.push_back(Value::f32(score));
    writer.set(key("scores"), Value::array(ValueType::F32, std::move(scores)));
  }
  writer.set(key("token_type"), Value::array(ValueType::I32, std::move(kinds)));
  if (!vocab.merges.empty()) {
    std::vector<Value> merges;
    merges.reserve(vocab.merges.size());
    for (const std::string& merge : vocab.merges) merges.push_back(Value::string(merge));
    writer.set(key("merges"), Value::array(ValueType::STRING, std::move(merges)));
  }
  const std::pair<const char*, TokenId> ids[] = {{"bos_token_id", vocab.bos}, {"eos_token_id", vocab.eos},
                                                 {"unknown_token_id", vocab.unknown}, {"padding_token_id", vocab.padding},
                                                 {"eot_token_id", vocab.eot}};
  for (const auto& [name, id] : ids) {
    if (id >= 0) writer.set(key(name), Value::u32(static_cast<uint32_t>(id)));
  }
  writer.set(key("add_bos_token"), Value::boolean(vocab.add_bos.value_or(false)));
  writer.set(key("add_eos_token"), Value::boolean(vocab.add_eos));
}

}  // namespace orchard::model
