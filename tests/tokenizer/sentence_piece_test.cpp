// SentencePiece ("llama") tokenization on handcrafted vocabularies; expected ids derived by hand
// from the rules: ▁ for spaces and a ▁ prefix, then repeatedly merge the adjacent pair whose
// concatenation is the highest-scoring token (leftmost on ties), bytes for unknown characters.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_vocab.h"

namespace orchard::model {
namespace {

using test::id_of;
using test::spm_byte;
using test::spm_vocab;
using Ids = std::vector<TokenId>;

const std::string kSpace = "\xE2\x96\x81";  // ▁

TEST(SentencePiece, ScoresDecideTheMergeOrder) {
  // "abc": both "ab" and "bc" are tokens; the higher score merges first and blocks the other.
  VocabData ab_first = spm_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}});
  ab_first.add_space_prefix = false;
  VocabData bc_first = ab_first;
  bc_first.scores[id_of(bc_first, "bc")] = 0;
  const Tokenizer t1 = Tokenizer::from_vocab(ab_first);
  const Tokenizer t2 = Tokenizer::from_vocab(bc_first);
  EXPECT_EQ(t1.encode("abc", false), (Ids{id_of(ab_first, "ab"), id_of(ab_first, "c")}));
  EXPECT_EQ(t2.encode("abc", false), (Ids{id_of(ab_first, "a"), id_of(ab_first, "bc")}));
}

TEST(SentencePiece, EqualScoresMergeLeftmostFirst) {
  VocabData v = spm_vocab({{"a", -10}, {"aa", -1}});
  v.add_space_prefix = false;
  const Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_EQ(t.encode("aaa", false), (Ids{id_of(v, "aa"), id_of(v, "a")}));
  EXPECT_EQ(t.encode("aaaa", false), (Ids{id_of(v, "aa"), id_of(v, "aa")}));
}

TEST(SentencePiece, MergesChainThroughIntermediatePieces) {
  // "▁hello" = ▁ h e l l o. Pairs that are tokens: "ll" (-1) then "he" (-2) give ▁ he ll o;
  // then "hell" (-3), "hello" (-4) and finally "▁hello" (-5).
  const std::vector<std::pair<std::string, float>> pieces = {
      {kSpace, -20}, {"h", -20}, {"e", -20}, {"l", -20}, {"o", -20}, {"ll", -1}, {"he", -2}, {"hell", -3}, {"hello", -4}};
  VocabData with_word = spm_vocab(pieces);
  with_word.tokens.push_back(kSpace + "hello");
  with_word.scores.push_back(-5);
  with_word.kinds.push_back(TokenKind::Normal);
  EXPECT_EQ(Tokenizer::from_vocab(with_word).encode("hello", false), (Ids{id_of(with_word, kSpace + "hello")}));
  const VocabData without_word = spm_vocab(pieces);
  EXPECT_EQ(Tokenizer::from_vocab(without_word).encode("hello", false),
            (Ids{id_of(without_word, kSpace), id_of(without_word, "hello")}));
}

TEST(SentencePiece, SpacesBecomeMarkersAndDecodeBack) {
  const VocabData v = spm_vocab({{kSpace, -20}, {"a", -20}, {"b", -20}, {kSpace + "a", -1}, {kSpace + "b", -2}});
  const Tokenizer t = Tokenizer::from_vocab(v);
  const TokenId sp = id_of(v, kSpace), sa = id_of(v, kSpace + "a"), sb = id_of(v, kSpace + "b");
  EXPECT_EQ(t.encode("a b", false), (Ids{sa, sb}));
  EXPECT_EQ(t.encode(" a", false), (Ids{sp, sa}));      // "▁▁a": the prefix plus the space
  EXPECT_EQ(t.encode("a  b", false), (Ids{sa, sp, sb}));
  EXPECT_EQ(t.token_bytes(sa), " a");
  EXPECT_EQ(t.decode(Ids{sa, sb}), "a b");               // the prefix's space is dropped
  EXPECT_EQ(t.decode(Ids{sp, sa}), " a");
  EXPECT_EQ(t.decode(Ids{1, sa}), "a");                  // also after BOS
  EXPECT_EQ(t.encode("", false), Ids{});
  EXPECT_EQ(t.encode("", true), Ids{1});
  EXPECT_EQ(t.encode("a", true), (Ids{1, sa}));
  EXPECT_TRUE(t.adds_bos());
  EXPECT_FALSE(t.adds_eos());
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_TRUE(t.is_end_of_generation(2));
  EXPECT_FALSE(t.is_end_of_generation(sa));
  EXPECT_EQ(t.model_name(), "llama");
}

TEST(SentencePiece, WithoutSpacePrefix) {
  VocabData v = spm_vocab({{kSpace, -20}, {"a", -20}, {kSpace + "a", -1}});
  v.add_space_prefix = false;
  const Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_EQ(t.encode("a a", false), (Ids{id_of(v, "a"), id_of(v, kSpace + "a")}));
  EXPECT_EQ(t.decode(t.encode(" a", false)), " a");
}

TEST(SentencePiece, UnknownCharactersFallBackToUtf8Bytes) {
  const VocabData v = spm_vocab({{kSpace, -20}, {"x", -20}});
  const Tokenizer t = Tokenizer::from_vocab(v);
  const TokenId sp = id_of(v, kSpace), x = id_of(v, "x");
  EXPECT_EQ(t.encode("x\xC3\xA9", false), (Ids{sp, x, spm_byte(0xC3), spm_byte(0xA9)}));                         // é: 2 bytes
  EXPECT_EQ(t.encode("\xE2\x82\xAC", false), (Ids{sp, spm_byte(0xE2), spm_byte(0x82), spm_byte(0xAC)}));        // €: 3 bytes
  EXPECT_EQ(t.encode("\xF0\x9F\xA6\x99", false), (Ids{sp, spm_byte(0xF0), spm_byte(0x9F), spm_byte(0xA6), spm_byte(0x99)}));  // 🦙
  EXPECT_EQ(t.encode("x\n", false), (Ids{sp, x, spm_byte('\n')}));
  EXPECT_EQ(t.token_bytes(spm_byte(0xC3)), "\xC3");
  EXPECT_EQ(t.decode(t.encode("x\xC3\xA9\xF0\x9F\xA6\x99 x", false)), "x\xC3\xA9\xF0\x9F\xA6\x99 x");
  // Combining marks are characters of their own: e + U+0301.
  EXPECT_EQ(t.encode("x\xCC\x81", false), (Ids{sp, x, spm_byte(0xCC), spm_byte(0x81)}));
}

TEST(SentencePiece, InvalidUtf8IsEncodedAsItsBytes) {
  const VocabData v = spm_vocab({{kSpace, -20}, {"a", -20}, {"b", -20}});
  const Tokenizer t = Tokenizer::from_vocab(v);
  const std::string text = "a\xFF" "b\xE2\x82";
  const Ids ids = t.encode(text, false);
  EXPECT_EQ(ids, (Ids{id_of(v, kSpace), id_of(v, "a"), spm_byte(0xFF), id_of(v, "b"), spm_byte(0xE2), spm_byte(0x82)}));
  EXPECT_EQ(t.decode(ids), text);
}

TEST(SentencePiece, UnusedAndControlTokensAreNeverProducedByMerging) {
  VocabData v = spm_vocab({{kSpace, -20}, {"a", -20}, {"b", -20}, {"ab", 0}});
  v.kinds[id_of(v, "ab")] = TokenKind::Unused;
  const Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_EQ(t.encode("ab", false), (Ids{id_of(v, kSpace), id_of(v, "a"), id_of(v, "b")}));
  EXPECT_EQ(t.token_bytes(id_of(v, "ab")), "");
  // "<s>" typed as text is not the BOS token.
  const Ids ids = t.encode("<s>", false, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
}

TEST(SentencePiece, SpecialTokensSplitOutWithParseSpecial) {
  VocabData v = spm_vocab({{kSpace, -20}, {"a", -20}, {kSpace + "a", -1}, {"<|im_start|>", 0}, {"<|im", 0}});
  v.kinds[id_of(v, "<|im_start|>")] = TokenKind::Control;
  v.kinds[id_of(v, "<|im")] = TokenKind::UserDefined;
  const Tokenizer t = Tokenizer::from_vocab(v);
  const TokenId start = id_of(v, "<|im_start|>"), im = id_of(v, "<|im"), sa = id_of(v, kSpace + "a");
  // Longest match wins; the text after a special token gets the ▁ prefix again.
  EXPECT_EQ(t.encode("<|im_start|>a", false), (Ids{start, sa}));
  EXPECT_EQ(t.encode("a<|im_start|>a", true), (Ids{1, sa, start, sa}));
  EXPECT_EQ(t.encode("a<|ima", false), (Ids{sa, im, sa}));
  EXPECT_EQ(t.encode("</s>", false), Ids{2});
  // Without parse_special the text is plain characters (bytes here).
  const Ids plain = t.encode("<|im_start|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(t.decode(plain), "<|im_start|>");
  EXPECT_EQ(t.token_bytes(start), "");   // control tokens decode to nothing
  EXPECT_EQ(t.token_bytes(im), "<|im");  // user-defined ones to their text
}

TEST(SentencePiece, EndOfGenerationTokens) {
  VocabData v = spm_vocab({{"<|im_end|>", 0}, {"<|eot_id|>", 0}, {"plain", 0}});
  v.kinds[id_of(v, "<|im_end|>")] = TokenKind::Control;
  v.kinds[id_of(v, "<|eot_id|>")] = TokenKind::Control;
  const Tokenizer t = Tokenizer::from_vocab(v);
  EXPECT_TRUE(t.is_end_of_generation(2));
  EXPECT_TRUE(t.is_end_of_generation(id_of(v, "<|im_end|>")));
  EXPECT_TRUE(t.is_end_of_generation(id_of(v, "<|eot_id|>")));
  EXPECT_FALSE(t.is_end_of_generation(1));
  EXPECT_FALSE(t.is_end_of_generation(id_of(v, "plain")));
}

TEST(SentencePiece, RejectsInconsistentVocabularies) {
  VocabData v = spm_vocab({{"a", 0}});
  v.scores.pop_back();
  EXPECT_THROW(Tokenizer::from_vocab(v), FormatError);
  v = spm_vocab({{"a", 0}});
  v.bos = static_cast<TokenId>(v.tokens.size());
  EXPECT_THROW(Tokenizer::from_vocab(v), FormatError);
  v = spm_vocab({{"a", 0}});
  v.model = "bert";
  try {
    Tokenizer::from_vocab(v);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("supported: llama, gpt2"), std::string::npos) << e.what();
  }
  const Tokenizer t = Tokenizer::from_vocab(spm_vocab({}));
  EXPECT_THROW(t.token_bytes(-1), FormatError);
  EXPECT_THROW(t.token_text(t.vocab_size()), FormatError);
}

}  // namespace
}  // namespace orchard::model
