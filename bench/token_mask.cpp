// Time of one structured-output token mask (serve/structured/token_mask.h) on 32k-token
// vocabularies, at every byte of a schema document: the mask is computed once per generated
// token, so this is the per-token cost constrained sampling adds.
//   bench_token_mask [REPS]
// Vocabularies: make-model's learned one at tinyllama's 32000 tokens (its corpus is small, so
// most are unused padding), and one of 32000 real pieces: the 256 byte tokens plus the
// corpus's distinct substrings of 1-10 bytes, with and without a leading ▁, the shape of a
// SentencePiece vocabulary, where nearly every piece may continue a string.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/tokenizer/corpus.h"
#include "model/tokenizer/vocab_builder.h"
#include "serve/structured/json_schema.h"
#include "serve/structured/token_mask.h"

namespace {

using namespace orchard;
using Clock = std::chrono::steady_clock;

model::Tokenizer corpus_vocabulary(size_t size) {
  model::VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.kinds = {model::TokenKind::Unknown, model::TokenKind::Control, model::TokenKind::Control};
  v.unknown = 0, v.bos = 1, v.eos = 2;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.kinds.push_back(model::TokenKind::Byte);
  }
  std::set<std::string> seen;
  const std::string_view corpus = model::training_corpus();
  for (size_t length = 1; length <= 10 && v.tokens.size() < size; ++length) {
    for (size_t at = 0; at + length <= corpus.size() && v.tokens.size() < size; ++at) {
      std::string piece(corpus.substr(at, length));
      if (piece.find('\n') != std::string::npos) continue;
      std::string spm;
      for (char c : piece) spm += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      for (const std::string& p : {spm, "\xE2\x96\x81" + spm}) {
        if (v.tokens.size() < size && seen.insert(p).second) {
          v.tokens.push_back(p);
          v.kinds.push_back(model::TokenKind::Normal);
        }
      }
    }
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  return model::Tokenizer::from_vocab(v);
}

void measure(const char* name, const model::Tokenizer& tok, int reps) {
  using namespace serve::structured;
  const auto schema = nlohmann::json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "trees": {"type": "integer"}, "fruit": {"enum": ["apple", "pear"]},
      "rows": {"type": "array", "items": {"type": "number"}}}, "required": ["name", "trees", "fruit", "rows"],
      "additionalProperties": false})");
  Grammar g;
  g.finish(compile_schema(g, schema));
  const auto t0 = Clock::now();
  TokenTrie trie(tok);
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<Recognizer> scratch(trie.max_token_bytes() + 1, Recognizer(g));
  std::vector<uint8_t> allowed(static_cast<size_t>(tok.vocab_size()));
  const std::string doc = R"({"name": "The old orchard by the river", "trees": 1250, "fruit": "pear", "rows": [12.5, -3, 7]})";
  Recognizer state(g);
  double total = 0, worst = 0;
  int states = 0;
  long allowed_sum = 0;
  for (size_t i = 0; i <= doc.size(); ++i) {
    double best = 1e30;
    int32_t count = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t = Clock::now();
      count = trie.mask(state, allowed, scratch);
      best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    }
    total += best, worst = std::max(worst, best), ++states, allowed_sum += count;
    if (i < doc.size() && !state.feed(static_cast<uint8_t>(doc[i]))) std::abort();
  }
  fmt::print("{}: {} tokens, trie of {} nodes built in {:.1f} ms; mask per token: mean {:.0f} us, worst {:.0f} us "
             "(best of {} at each of {} states; {:.0f} tokens allowed on average)\n",
             name, tok.vocab_size(), trie.nodes(), build_ms, total / states, worst, reps, states,
             static_cast<double>(allowed_sum) / states);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  measure("corpus pieces", corpus_vocabulary(32000), reps);
  measure("make-model spm", model::Tokenizer::from_vocab(model::build_vocab(model::VocabStyle::SentencePiece, 32000)), reps);
  measure("make-model llama3 bpe", model::Tokenizer::from_vocab(model::build_vocab(model::VocabStyle::Llama3Bpe, 32000)), reps);
  return 0;
}
