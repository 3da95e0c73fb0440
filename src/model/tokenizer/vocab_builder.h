#pragma once
// Builds real tokenizers for the models `orchard make-model` writes: a vocabulary learned by
// BPE from a text corpus shipped inside Orchard, with byte tokens so any text encodes, written
// as GGUF tokenizer.ggml.* metadata that any GGUF reader understands.
#include <cstdint>
#include <string>

#include "model/gguf/writer.h"

namespace orchard::model {

enum class VocabStyle {
  SentencePiece,  // tokenizer.ggml.model = "llama" (Llama 2, TinyLlama, Mistral)
  Llama3Bpe,      // "gpt2" with pre "llama-bpe"
  Qwen2Bpe,       // "gpt2" with pre "qwen2"
};

// Writes the tokenizer.ggml.* keys for a vocabulary of exactly `vocab_size` tokens (specials,
// then the 256 byte tokens / byte alphabet, then learned merges, padded with unused tokens when
// the corpus yields fewer). Deterministic: the same arguments give the same vocabulary.
void write_vocab(gguf::Writer& writer, VocabStyle style, int32_t vocab_size);

}  // namespace orchard::model
