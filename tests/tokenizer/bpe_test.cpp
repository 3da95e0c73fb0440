// Byte-level BPE ("gpt2") on handcrafted vocabularies; expected ids derived by hand: bytes map
// to GPT-2's printable characters, then the adjacent pair with the lowest merge rank merges
// first (leftmost on ties), within each pre-tokenizer piece.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_vocab.h"

namespace orchard::model {
namespace {

using test::bpe_vocab;
using test::id_of;
using Ids = std::vector<TokenId>;

const std::string kG = "\xC4\xA0";  // Ġ, the mapped space

TEST(BytePairs, MergeRanksDecide) {
  const VocabData ab_first = bpe_vocab({"a b", "b c"}, "default");
  const VocabData bc_first = bpe_vocab({"b c", "a b"}, "default");
  EXPECT_EQ(Tokenizer::from_vocab(ab_first).encode("abc", false), (Ids{id_of(ab_first, "ab"), 'c'}));
  EXPECT_EQ(Tokenizer::from_vocab(bc_first).encode("abc", false), (Ids{'a', id_of(bc_first, "bc")}));
  const VocabData aa = bpe_vocab({"a a"}, "default");
  EXPECT_EQ(Tokenizer::from_vocab(aa).encode("aaa", false), (Ids{id_of(aa, "aa"), 'a'}));
}

TEST(BytePairs, HelloWorld) {
  // "hello": h e l l o -> he l l o -> he ll o -> hell o -> hello. " world" = Ġ w o r l d:
  // Ġw (4) -> or (5) -> Ġwor (6) -> ld (7) -> Ġworld (8).
  const VocabData v = bpe_vocab({"h e", "l l", "he ll", "hell o", kG + " w", "o r", kG + "w or", "l d", kG + "wor ld"}, "default");
  const Tokenizer t = Tokenizer::from_vocab(v);
  const Ids ids = t.encode("hello world", false);
  EXPECT_EQ(ids, (Ids{id_of(v, "hello"), id_of(v, kG + "world")}));
  EXPECT_EQ(t.token_bytes(ids[1]), " world");
  EXPECT_EQ(t.decode(ids), "hello world");
  // Merges never cross pre-tokenizer pieces: "lo" + "w" is not even considered.
  EXPECT_EQ(t.encode("hello  world", false), (Ids{id_of(v, "hello"), ' ', id_of(v, kG + "world")}));
  EXPECT_FALSE(t.adds_bos());
  EXPECT_EQ(t.bos(), -1);
  EXPECT_EQ(t.model_name(), "gpt2");
}

TEST(BytePairs, BytesMapThroughTheGpt2Alphabet) {
  const VocabData v = bpe_vocab({"\xC3\x83 \xC2\xA9"}, "default");  // "Ã ©" = the bytes of é
  const Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_EQ(t.encode("\xC3\xA9", false), (Ids{id_of(v, "\xC3\x83\xC2\xA9")}));
  EXPECT_EQ(t.encode("\xE2\x82\xAC", false), (Ids{0xE2, 0x82, 0xAC}));          // € has no merges: 3 byte tokens
  EXPECT_EQ(t.encode("a\nb", false), (Ids{'a', '\n', 'b'}));
  EXPECT_EQ(t.token_text('\n'), "\xC4\x8A");                                 // Ċ
  EXPECT_EQ(t.token_bytes('\n'), "\n");
  EXPECT_EQ(t.token_bytes(id_of(v, "\xC3\x83\xC2\xA9")), "\xC3\xA9");
  const std::string emoji = "\xF0\x9F\xA6\x99";
  EXPECT_EQ(t.encode(emoji, false), (Ids{0xF0, 0x9F, 0xA6, 0x99}));
  EXPECT_EQ(t.decode(t.encode("x " + emoji + " \xC3\xA9!", false)), "x " + emoji + " \xC3\xA9!");
}

TEST(BytePairs, InvalidUtf8IsEncodedAsItsBytes) {
  const Tokenizer t = Tokenizer::from_vocab(bpe_vocab({}, "llama-bpe"));
  const std::string text = "a\xFF" "b \x80\xE2\x82";
  const Ids ids = t.encode(text, false);
  EXPECT_EQ(ids, (Ids{'a', 0xFF, 'b', ' ', 0x80, 0xE2, 0x82}));
  EXPECT_EQ(t.decode(ids), text);
}

TEST(BytePairs, PreTokenizerFollowsTokenizerGgmlPre) {
  const std::vector<std::string> merges = {"1 2", "12 3", "123 4"};
  EXPECT_EQ(Tokenizer::from_vocab(bpe_vocab(merges, "default")).encode("1234", false).size(), 1u);
  EXPECT_EQ(Tokenizer::from_vocab(bpe_vocab(merges, "llama-bpe")).encode("1234", false).size(), 2u);  // 123 | 4
  EXPECT_EQ(Tokenizer::from_vocab(bpe_vocab(merges, "llama3")).pre_tokenizer(), "llama3");
  EXPECT_EQ(Tokenizer::from_vocab(bpe_vocab(merges, "qwen2")).encode("1234", false).size(), 4u);      // 1|2|3|4
  EXPECT_EQ(Tokenizer::from_vocab(bpe_vocab(merges, "gpt-4o")).encode("1234", false).size(), 2u);     // 123 | 4
  try {
    Tokenizer::from_vocab(bpe_vocab(merges, "falcon"));
    ADD_FAILURE() << "an unknown pre-tokenizer was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre 'falcon' is not supported (supported: default, gpt2, "
                                         "llama-bpe, llama3, qwen2, gpt-4o)"),
              std::string::npos)
        << e.what();
  }
}

// o200k's split decides where merges may act: "'S" stays with "DON", and a case change ends a
// word. Merges: D O, DO N, ' S, DON 'S, o W.
TEST(BytePairs, Gpt4oMergesWithinItsPieces) {
  const VocabData v = bpe_vocab({"D O", "DO N", "' S", "DON 'S", "o W"}, "gpt-4o");
  const Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_EQ(t.encode("DON'S", false), (Ids{id_of(v, "DON'S")}));
  EXPECT_EQ(t.encode("oW", false), (Ids{'o', 'W'}));  // "o" | "W": never merged
  EXPECT_EQ(Tokenizer::from_vocab(bpe_vocab({"D O", "DO N", "' S", "DON 'S"}, "llama-bpe")).encode("DON'S", false),
            (Ids{id_of(v, "DON"), id_of(v, "'S")}));  // Llama 3 splits the contraction off
}

TEST(BytePairs, Llama3TakesWholeWordsThatAreTokens) {
  // "abc" is a token no merge sequence reaches from "ab": Llama 3 takes it whole, GPT-2 doesn't.
  VocabData v = bpe_vocab({"a b"}, "llama-bpe");
  v.tokens.push_back("abc");
  EXPECT_EQ(Tokenizer::from_vocab(v).encode("abc", false), (Ids{id_of(v, "abc")}));
  v.pre = "default";
  EXPECT_EQ(Tokenizer::from_vocab(v).encode("abc", false), (Ids{id_of(v, "ab"), 'c'}));
}

TEST(BytePairs, SpecialTokensAndBos) {
  VocabData v = bpe_vocab({"h i"}, "qwen2");
  v.tokens.push_back("<|endoftext|>");
  v.tokens.push_back("<|im_start|>");
  v.tokens.push_back("<|im_end|>");
  v.kinds.assign(v.tokens.size(), TokenKind::Normal);
  const TokenId end = id_of(v, "<|endoftext|>"), start = id_of(v, "<|im_start|>"), im_end = id_of(v, "<|im_end|>");
  for (TokenId id : {end, start, im_end}) v.kinds[id] = TokenKind::Control;
  v.bos = end;
  v.eos = im_end;
  const Tokenizer t = Tokenizer::from_vocab(v);
  const TokenId hi = id_of(v, "hi");
  EXPECT_EQ(t.encode("<|im_start|>hi<|im_end|>", false), (Ids{start, hi, im_end}));
  EXPECT_EQ(t.encode("hi", true), (Ids{end, hi}));
  const Ids plain = t.encode("<|im_end|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(t.decode(plain), "<|im_end|>");
  EXPECT_EQ(t.decode(Ids{start, hi, im_end}), "hi");
  EXPECT_TRUE(t.is_end_of_generation(im_end));
  EXPECT_TRUE(t.is_end_of_generation(end));  // <|endoftext|> by name
  EXPECT_FALSE(t.is_end_of_generation(start));
}

// Control tokens that mark a reply's structure decode to their text (Mistral v11's calls,
// reasoning models' think block); the others to nothing.
TEST(BytePairs, ReplyMarkersDecodeToTheirText) {
  VocabData v = bpe_vocab({"h i"}, "qwen2");
  const std::vector<std::string> markers = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<think>", "</think>", "[INST]"};
  for (const std::string& m : markers) v.tokens.push_back(m);
  v.kinds.assign(v.tokens.size(), TokenKind::Normal);
  for (const std::string& m : markers) v.kinds[id_of(v, m)] = TokenKind::Control;
  v.bos = v.eos = id_of(v, "[INST]");
  const Tokenizer t = Tokenizer::from_vocab(v);
  const Ids reply = t.encode("[INST]<think>hi</think>[TOOL_CALLS]hi[CALL_ID]hi[ARGS]hi", false);
  EXPECT_EQ(reply.size(), 10u);
  EXPECT_EQ(t.decode(reply), "<think>hi</think>[TOOL_CALLS]hi[CALL_ID]hi[ARGS]hi");
}

TEST(BytePairs, MalformedMergesAreRejected) {
  VocabData v = bpe_vocab({}, "default");
  v.merges.push_back("ab");
  EXPECT_THROW(Tokenizer::from_vocab(v), FormatError);
}

}  // namespace
}  // namespace orchard::model
