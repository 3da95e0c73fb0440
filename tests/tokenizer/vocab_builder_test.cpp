#include "model/tokenizer/vocab_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <set>
#include <unordered_set>

#include "core/error.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "round_trip_texts.h"

namespace orchard::model {
namespace {

struct Shape {
  VocabStyle style;
  int32_t vocab_size;
  const char* name;
};
// The shapes of TinyLlama, Llama 3 8B, Qwen2 and gpt-oss.
constexpr Shape kShapes[] = {{VocabStyle::SentencePiece, 32000, "spm"},
                             {VocabStyle::Llama3Bpe, 128256, "llama3"},
                             {VocabStyle::Qwen2Bpe, 151936, "qwen2"},
                             {VocabStyle::Gpt4oBpe, 201088, "gpt4o"}};

class VocabBuilder : public testing::TestWithParam<Shape> {};

TEST_P(VocabBuilder, BuildsExactlyTheSizeDeterministically) {
  const Shape shape = GetParam();
  const VocabData v = build_vocab(shape.style, shape.vocab_size);
  ASSERT_EQ(v.tokens.size(), static_cast<size_t>(shape.vocab_size));
  ASSERT_EQ(v.kinds.size(), v.tokens.size());
  const std::set<std::string> distinct(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(distinct.size(), v.tokens.size());
  const VocabData again = build_vocab(shape.style, shape.vocab_size);
  EXPECT_EQ(again.tokens, v.tokens);
  EXPECT_EQ(again.merges, v.merges);
  EXPECT_EQ(again.scores, v.scores);
  // The corpus is small, so the rest is padding; but it must have learned real pieces.
  const auto normal = std::count(v.kinds.begin(), v.kinds.end(), TokenKind::Normal);
  EXPECT_GT(normal, 1500);
  EXPECT_GT(std::count(v.kinds.begin(), v.kinds.end(), TokenKind::Unused), 0);
}

TEST_P(VocabBuilder, RoundTripsTextExactly) {
  const Shape shape = GetParam();
  const Tokenizer t = Tokenizer::from_vocab(build_vocab(shape.style, shape.vocab_size));
  for (const std::string& text : test::round_trip_texts(400, 11)) {
    const std::vector<TokenId> ids = t.encode(text, false, false);
    ASSERT_EQ(t.decode(ids), text) << testing::PrintToString(text);
    for (TokenId id : ids) ASSERT_NE(t.token_kind(id), TokenKind::Unused);
    // With BOS, decoding still gives the text.
    ASSERT_EQ(t.decode(t.encode(text, true, false)), text);
  }
}

TEST_P(VocabBuilder, RoundTripsArbitraryBytes) {
  const Shape shape = GetParam();
  const Tokenizer t = Tokenizer::from_vocab(build_vocab(shape.style, shape.vocab_size));
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    std::string text(rng() % 24, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 4 == 0 ? ' ' : rng() % 256);
    if (text.find("\xE2\x96\x81") != std::string::npos) continue;  // ▁ reads as a space in SentencePiece
    ASSERT_EQ(t.decode(t.encode(text, false, false)), text) << testing::PrintToString(text);
  }
}

TEST_P(VocabBuilder, LearnedTokensCompressCommonText) {
  const Shape shape = GetParam();
  const Tokenizer t = Tokenizer::from_vocab(build_vocab(shape.style, shape.vocab_size));
  const std::string text = "The old gardener kept a notebook in which he wrote the date of the first blossom.";
  EXPECT_LT(t.encode(text, false).size(), text.size() / 3);
}

INSTANTIATE_TEST_SUITE_P(Styles, VocabBuilder, testing::ValuesIn(kShapes),
                         [](const testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

TEST(VocabBuilderLayout, SentencePiece) {
  const VocabData v = build_vocab(VocabStyle::SentencePiece, 32000);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.kinds[0], TokenKind::Unknown);
  EXPECT_EQ(v.kinds[1], TokenKind::Control);
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.tokens[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(v.tokens[258], "<0xFF>");
  for (int i = 3; i < 259; ++i) EXPECT_EQ(v.kinds[i], TokenKind::Byte);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unknown, 0);
  // Learned pieces: scores strictly descending, spaces as ▁.
  float previous = 1.0f;
  size_t with_marker = 0;
  for (size_t i = 259; i < v.tokens.size() && v.kinds[i] == TokenKind::Normal; ++i) {
    EXPECT_LT(v.scores[i], previous);
    previous = v.scores[i];
    EXPECT_EQ(v.tokens[i].find(' '), std::string::npos);
    with_marker += v.tokens[i].starts_with("\xE2\x96\x81") ? 1 : 0;
  }
  EXPECT_GT(with_marker, 500u);
  EXPECT_NE(std::find(v.tokens.begin(), v.tokens.end(), "\xE2\x96\x81the"), v.tokens.end());
  EXPECT_EQ(v.kinds.back(), TokenKind::Unused);
}

TEST(VocabBuilderLayout, ByteLevelSpecialsAndMergeConsistency) {
  for (VocabStyle style : {VocabStyle::Llama3Bpe, VocabStyle::Qwen2Bpe, VocabStyle::Gpt4oBpe}) {
    const int32_t size = style == VocabStyle::Llama3Bpe ? 128256 : 151936;
    const VocabData v = build_vocab(style, size);
    EXPECT_EQ(v.model, "gpt2");
    const auto& alphabet = unicode::byte_to_unicode();
    for (int b = 0; b < 256; ++b) EXPECT_EQ(v.tokens[b], alphabet[b]);
    const std::unordered_set<std::string> tokens(v.tokens.begin(), v.tokens.end());
    for (const std::string& merge : v.merges) {
      const size_t space = merge.find(' ');
      ASSERT_NE(space, std::string::npos);
      EXPECT_TRUE(tokens.count(merge.substr(0, space))) << merge;
      EXPECT_TRUE(tokens.count(merge.substr(space + 1))) << merge;
      EXPECT_TRUE(tokens.count(merge.substr(0, space) + merge.substr(space + 1))) << merge;
    }
    const std::vector<std::string> specials =
        style == VocabStyle::Llama3Bpe
            ? std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"}
        : style == VocabStyle::Gpt4oBpe
            ? std::vector<std::string>{"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                                       "<|start|>", "<|end|>", "<|message|>", "<|call|>"}
            : std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (size_t i = 0; i < specials.size(); ++i) {
      const size_t id = v.tokens.size() - specials.size() + i;
      EXPECT_EQ(v.tokens[id], specials[i]);
      EXPECT_EQ(v.kinds[id], TokenKind::Control);
    }
    const Tokenizer t = Tokenizer::from_vocab(v);
    if (style == VocabStyle::Llama3Bpe) {
      EXPECT_EQ(v.pre, "llama-bpe");
      EXPECT_EQ(t.token_text(t.bos()), "<|begin_of_text|>");
      EXPECT_TRUE(t.adds_bos());
      const auto eot = t.encode("<|eot_id|>", false);
      ASSERT_EQ(eot.size(), 1u);
      EXPECT_TRUE(t.is_end_of_generation(eot[0]));
      EXPECT_TRUE(t.is_end_of_generation(t.eos()));
    } else if (style == VocabStyle::Gpt4oBpe) {
      // Harmony: a reply ends at <|return|> or <|call|>, not at the <|end|> closing its analysis,
      // and the markers of its messages and channels decode to their text (llama.cpp does the same).
      EXPECT_EQ(v.pre, "gpt-4o");
      EXPECT_FALSE(t.adds_bos());
      EXPECT_EQ(t.token_text(t.eos()), "<|return|>");
      const auto id = [&](std::string_view text) { return t.encode(text, false).at(0); };
      EXPECT_TRUE(t.is_end_of_generation(id("<|call|>")));
      EXPECT_FALSE(t.is_end_of_generation(id("<|end|>")));
      const std::vector<TokenId> reply = t.encode("<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi", false);
      EXPECT_EQ(t.decode(reply), "<|channel|>analysis<|message|>hm<|start|>assistant<|channel|>final<|message|>Hi");
    } else {
      EXPECT_EQ(v.pre, "qwen2");
      EXPECT_FALSE(t.adds_bos());
      EXPECT_EQ(t.token_text(t.eos()), "<|im_end|>");
      EXPECT_TRUE(t.is_end_of_generation(t.encode("<|endoftext|>", false).at(0)));
    }
  }
}

// Merges never cross a pre-tokenizer piece. Qwen2's split cuts a word before any apostrophe, so
// no token of its vocabulary has a letter followed by one; o200k's keeps "don't" whole, so merges
// learned with it can join a contraction to its word.
TEST(VocabBuilderLayout, Gpt4oMergesFollowItsSplit) {
  const auto letter_then_apostrophe = [](const VocabData& v) {
    return std::count_if(v.tokens.begin(), v.tokens.end(), [](const std::string& token) {
      const size_t at = token.find('\'');
      return at != std::string::npos && at > 0 && std::isalpha(static_cast<unsigned char>(token[at - 1]));
    });
  };
  const VocabData gpt4o = build_vocab(VocabStyle::Gpt4oBpe, 8000);
  EXPECT_EQ(gpt4o.pre, "gpt-4o");
  EXPECT_GT(letter_then_apostrophe(gpt4o), 0);
  EXPECT_EQ(letter_then_apostrophe(build_vocab(VocabStyle::Qwen2Bpe, 8000)), 0);
  const Tokenizer t = Tokenizer::from_vocab(gpt4o);
  const std::string text = "HelloWorld DON'T stop, it's 12345";
  // Every piece of the split ends on a token boundary.
  std::set<size_t> token_ends;
  size_t offset = 0;
  for (TokenId id : t.encode(text, false, false)) token_ends.insert(offset += t.token_bytes(id).size());
  EXPECT_EQ(offset, text.size());
  offset = 0;
  for (std::string_view piece : pre_tokenize(text, PreTokenizer::Gpt4o)) {
    offset += piece.size();
    EXPECT_TRUE(token_ends.count(offset)) << piece;
  }
}

TEST(VocabBuilderLayout, SmallAndTooSmallSizes) {
  for (VocabStyle style : {VocabStyle::SentencePiece, VocabStyle::Llama3Bpe, VocabStyle::Qwen2Bpe, VocabStyle::Gpt4oBpe}) {
    const VocabData v = build_vocab(style, 300);
    EXPECT_EQ(v.tokens.size(), 300u);
    const Tokenizer t = Tokenizer::from_vocab(v);
    EXPECT_EQ(t.decode(t.encode("Small vocabularies still round-trip: \xE2\x82\xAC", false)), "Small vocabularies still round-trip: \xE2\x82\xAC");
    EXPECT_THROW(build_vocab(style, 258), Error);
  }
}

}  // namespace
}  // namespace orchard::model
