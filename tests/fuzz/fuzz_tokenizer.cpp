// libFuzzer target for the tokenizers: any bytes encode (no crash, every id in the vocabulary),
// and the byte-level BPE gives the bytes back exactly when decoded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/tokenizer/vocab_builder.h"

using orchard::model::Tokenizer;
using orchard::model::VocabStyle;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer bpe = Tokenizer::from_vocab(orchard::model::build_vocab(VocabStyle::Qwen2Bpe, 600));
  static const Tokenizer sentencepiece =
      Tokenizer::from_vocab(orchard::model::build_vocab(VocabStyle::SentencePiece, 600));
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Tokenizer* t : {&bpe, &sentencepiece}) {
    for (bool special : {false, true}) {
      const auto ids = t->encode(text, false, special);
      for (auto id : ids)
        if (id < 0 || id >= t->vocab_size()) std::abort();
      if (t == &bpe && !special && t->decode(ids) != text) std::abort();
    }
  }
  return 0;
}
