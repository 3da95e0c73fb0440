#pragma once
// Builds real tokenizers for the models `orchard make-model` writes: a vocabulary learned by
// BPE from a text corpus shipped inside Orchard, with byte tokens so any text encodes, written
// as GGUF tokenizer.ggml.* metadata that any GGUF reader understands.
#include <cstdint>
#include <string>

#include "model/gguf/writer.h"
#include "model/tokenizer/tokenizer.h"

namespace orchard::model {

enum class VocabStyle {
  SentencePiece,  // tokenizer.ggml.model = "llama" (Llama 2, TinyLlama, Mistral)
  Llama3Bpe,      // "gpt2" with pre "llama-bpe"
  Qwen2Bpe,       // "gpt2" with pre "qwen2"
  Gpt4oBpe,       // "gpt2" with pre "gpt-4o" (o200k's split, as gpt-oss files have)
};

// A vocabulary of exactly `vocab_size` tokens, learned by BPE (most frequent pair first, ties to
// the pair of older symbols) from the shipped corpus (corpus.cpp), deterministic and without disk caches:
//   SentencePiece: <unk> <s> </s>, <0x00>..<0xFF> (Byte), learned pieces (▁ for spaces, scores
//     descending), the corpus's characters, then <unused_N> (Unused) padding.
//   Llama3Bpe / Qwen2Bpe / Gpt4oBpe: the 256-character byte alphabet (id = byte value), learned
//     tokens in merge order (words split by the style's pre-tokenizer), <|unused_N|> (Unused)
//     padding, then the specials as the last ids:
//     Llama3: <|begin_of_text|> <|end_of_text|> <|eot_id|> <|start_header_id|> <|end_header_id|>;
//     Qwen2 and Gpt4o: <|endoftext|> <|im_start|> <|im_end|> (ChatML, which Orchard renders for
//     these files; real gpt-oss files use the Harmony format's tokens instead).
// Every merge's parts and result are tokens. Throws Error when vocab_size cannot hold the byte
// tokens and specials.
VocabData build_vocab(VocabStyle style, int32_t vocab_size);

// Writes build_vocab(style, vocab_size) as tokenizer.ggml.* keys (model, pre, tokens, scores,
// token_type, merges, special token ids, add_bos_token/add_eos_token).
void write_vocab(gguf::Writer& writer, VocabStyle style, int32_t vocab_size);

}  // namespace orchard::model
