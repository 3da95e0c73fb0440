// Structured output: the JSON recognizer against hand-written documents, schemas compiled into
// grammars (and refused), the token mask against brute force over a tiny vocabulary, tool-call
// grammars, prompts and parsing, and the request fields that turn them on.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "model/sampler.h"
#include "serve/fake_engine.h"
#include "serve/scheduler.h"
#include "serve/openai/schema.h"
#include "serve/structured/grammar.h"
#include "serve/structured/json_schema.h"
#include "serve/structured/token_mask.h"
#include "serve/structured/tool_calls.h"

namespace orchard::serve::structured {
namespace {

using nlohmann::json;

std::shared_ptr<Grammar> free_object() {
  auto g = std::make_shared<Grammar>();
  g->finish(Grammar::kAnyObject);
  return g;
}

std::shared_ptr<Grammar> schema_grammar(const json& schema) {
  auto g = std::make_shared<Grammar>();
  g->finish(compile_schema(*g, schema));
  return g;
}

// Whether the grammar accepts the whole document; on refusal, also that every byte before the
// refused one was accepted (the recognizer refuses at the first impossible byte, not later).
bool accepts(const Grammar& g, std::string_view doc) {
  Recognizer r(g);
  for (char c : doc)
    if (!r.feed(static_cast<uint8_t>(c))) return false;
  return r.complete();
}

// The byte at which the recognizer refuses `doc`; doc.size() when it takes all of it.
size_t refused_at(const Grammar& g, std::string_view doc) {
  Recognizer r(g);
  for (size_t i = 0; i < doc.size(); ++i)
    if (!r.feed(static_cast<uint8_t>(doc[i]))) return i;
  return doc.size();
}

TEST(JsonGrammar, FreeObjectsAcceptValidJson) {
  auto g = free_object();
  for (const char* doc : {R"({})", R"({"a": 1})", R"(  {"a":[1,2.5e3,-0.1,0,1E+2,true,false,null,"x\n\u00e9\"",[],{}]}  )",
                          R"({"b": {"c": {"d": []}}, "b": -0})", "{\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x8D\x8E\": \"ok\"}",
                          "{\n  \"a\": 1\n}"}) {
    Recognizer r(*g);
    EXPECT_TRUE(r.feed(std::string_view(doc).substr(0, std::string_view(doc).find_last_not_of(' ') + 1))) << doc;
    EXPECT_TRUE(r.complete()) << doc;
    EXPECT_TRUE(r.finished()) << doc;  // an object's '}' ends the document
  }
}

TEST(JsonGrammar, FreeObjectsRefuseInvalidJsonAtTheFirstBadByte) {
  auto g = free_object();
  const std::pair<const char*, size_t> cases[] = {
      {"[]", 0},               {"1", 0},                   {R"({"a":})", 5},          {R"({"a" 1})", 5},
      {R"({"a":1,})", 7},      {R"({"a":01})", 6},         {"{a:1}", 1},              {R"({"a":1}})", 7},
      {"{\"a\":\"\x01\"}", 6}, {R"({"a":tru})", 8},        {R"({"a":"\x"})", 7},      {R"({"a":1.})", 7},
      {R"({"a":-})", 6},       {"{\"a\":\"\xC0\xAF\"}", 6}, {"{\"a\":\"\xED\xA0\x80\"}", 7}, {R"({"a":1 2})", 7},
      {"{} ", 2},
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*g, doc), at) << doc;
  // Cut short: every prefix is taken, none is whole.
  for (const char* doc : {"{", R"({"a")", R"({"a":)", R"({"a":1)", R"({"a":[1,)", R"({"a":"x)"}) {
    EXPECT_EQ(refused_at(*g, doc), std::string_view(doc).size()) << doc;
    EXPECT_FALSE(accepts(*g, doc)) << doc;
  }
}

TEST(JsonGrammar, BoundsWhitespaceDigitsAndDepth) {
  auto g = free_object();
  EXPECT_TRUE(accepts(*g, "{" + std::string(kMaxWhitespace, ' ') + "}"));
  EXPECT_EQ(refused_at(*g, "{" + std::string(kMaxWhitespace + 1, ' ') + "}"), static_cast<size_t>(kMaxWhitespace) + 1);
  EXPECT_TRUE(accepts(*g, R"({"a":)" + std::string(kMaxIntegerDigits, '7') + "}"));
  EXPECT_FALSE(accepts(*g, R"({"a":)" + std::string(kMaxIntegerDigits + 1, '7') + "}"));
  EXPECT_FALSE(accepts(*g, R"({"a":1e1234})"));
  std::string deep = "{\"a\":";
  std::string closing = "}";
  for (int i = 0; i < kMaxDepth; ++i) {
    deep += "[";
    closing = "]" + closing;
  }
  EXPECT_LT(refused_at(*g, deep + closing), deep.size());
  // The deepest array can still close, and so can every one around it.
  const size_t cut = refused_at(*g, deep);
  std::string ok = deep.substr(0, cut);
  for (size_t i = 5; i < cut; ++i) ok += ']';
  EXPECT_TRUE(accepts(*g, ok + "}"));
  // No key starts where its value would have no room.
  std::string objects;
  for (int i = 0; i < kMaxDepth; ++i) objects += "{\"k\":";
  const size_t at = refused_at(*g, objects);
  EXPECT_EQ(objects[at], '"');
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 5},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "kind": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "score": {"type": ["number", "null"]},
    "ok": {"type": "boolean"},
    "nested": {"type": "object", "properties": {"x": {"const": 3}}, "required": ["x"], "additionalProperties": false}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

TEST(JsonSchemaGrammar, AcceptsDocumentsOfTheSchema) {
  auto g = schema_grammar(kPerson);
  for (const char* doc : {R"({"name": "bob", "age": 3})", R"({"age": -2, "name": "", "tags": ["a", "b"], "kind": null})",
                          R"({"name":"x","age":0,"kind":"y","score":1.5e-3,"ok":false,"nested":{"x":3}})",
                          "{\"nested\": {\"x\": 3}, \"score\": null, \"age\": 12, \"name\": \"\xC3\xA9\"}"})
    EXPECT_TRUE(accepts(*g, doc)) << doc;
}

TEST(JsonSchemaGrammar, RefusesWhatTheSchemaForbids) {
  auto g = schema_grammar(kPerson);
  const std::pair<const char*, size_t> cases[] = {
      {R"({"name": "bob"})", 14},                         // '}' before the required age
      {R"({"name": "bobbyx", "age": 1})", 15},            // longer than maxLength
      {R"({"name": "b", "age": 1.5})", 22},               // an integer
      {R"({"name": "a", "age": 1, "name": "b"})", 26},    // a property twice ("n" may still be "nested")
      {R"({"extra": 1})", 2},                             // no such property
      {R"({"tags": ["c"]})", 11},                         // not in the enum
      {R"({"tags": ["a","a","a"]})", 17},                 // maxItems
      {R"({"kind": 1})", 9},                              // neither string nor null
      {R"({"nested": {"x": 4}})", 17},                    // const
      {R"({"nested": {}})", 12},                          // required x
      {R"({"ok": "true"})", 7},                           // a boolean
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*g, doc), at) << doc;
}

// Random walks over single bytes: at every step some byte (or the end) must be allowed, the
// walk must end, and what it wrote must parse and hold the schema's shape (checked by hand on
// the parsed value, independently of the recognizer).
TEST(JsonSchemaGrammar, RandomByteWalksAlwaysContinueAndEndInValidDocuments) {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "s": {"type": "string", "maxLength": 4}, "i": {"type": "integer"}, "n": {"type": ["number", "null"]},
      "e": {"enum": ["x", 2, null]}, "a": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
      "o": {"type": "object", "properties": {"k": {"type": "string", "minLength": 1, "maxLength": 2}}, "required": ["k"],
            "additionalProperties": false}},
    "required": ["s", "i", "o"], "additionalProperties": false})");
  auto g = schema_grammar(schema);
  uint64_t z = 12345;
  auto next = [&] { return (z = z * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int walk = 0; walk < 300; ++walk) {
    Recognizer state(*g);
    std::string text;
    while (!state.finished()) {
      std::vector<int> options;
      for (int b = 1; b < 256; ++b) {
        Recognizer copy(state);
        if (copy.feed(static_cast<uint8_t>(b))) options.push_back(b);
      }
      if (state.complete()) options.push_back(-1);
      ASSERT_FALSE(options.empty()) << "stuck after " << text;
      ASSERT_LT(text.size(), 4000u) << "no end in sight: " << text.substr(0, 200);
      const int b = options[next() % options.size()];
      if (b < 0) break;
      ASSERT_TRUE(state.feed(static_cast<uint8_t>(b)));
      text += static_cast<char>(b);
    }
    const json doc = json::parse(text);
    ASSERT_TRUE(doc.is_object()) << text;
    for (const auto& [key, value] : doc.items()) {
      if (key == "s") EXPECT_TRUE(value.is_string() && value.get<std::string>().size() <= 4 * 4) << text;
      else if (key == "i") EXPECT_TRUE(value.is_number_integer()) << text;
      else if (key == "n") EXPECT_TRUE(value.is_number() || value.is_null()) << text;
      else if (key == "e") EXPECT_TRUE(value == "x" || value == 2 || value.is_null()) << text;
      else if (key == "a") EXPECT_TRUE(value.is_array() && value.size() <= 3 && std::all_of(value.begin(), value.end(), [](const json& v) { return v.is_boolean(); })) << text;
      else if (key == "o") EXPECT_TRUE(value.is_object() && value.size() == 1 && value["k"].is_string() && !value["k"].get<std::string>().empty()) << text;
      else ADD_FAILURE() << "unknown key " << key << " in " << text;
    }
    EXPECT_TRUE(doc.contains("s") && doc.contains("i") && doc.contains("o")) << text;
  }
}

TEST(JsonSchemaGrammar, EnumsRefsAndDictionaries) {
  auto enums = schema_grammar(json::parse(R"({"enum": [1, 12, "x", null, {"a": [true]}]})"));
  for (const char* doc : {"1", "12", R"("x")", "null", R"({"a":[true]})"}) EXPECT_TRUE(accepts(*enums, doc)) << doc;
  for (const char* doc : {"123", "2", R"("y")", R"({"a": [true]})"}) EXPECT_FALSE(accepts(*enums, doc)) << doc;
  Recognizer one(*enums);
  ASSERT_TRUE(one.feed("1"));
  EXPECT_TRUE(one.complete());
  EXPECT_FALSE(one.finished());  // 12 may still follow

  auto list = schema_grammar(json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                        "required": ["v", "next"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})"));
  EXPECT_TRUE(accepts(*list, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(accepts(*list, R"({"v": 1, "next": {"v": 2}})"));

  auto dictionary = schema_grammar(json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"));
  EXPECT_TRUE(accepts(*dictionary, R"({"any key": 1, "other": -3})"));
  EXPECT_FALSE(accepts(*dictionary, R"({"k": "v"})"));
  auto anything = schema_grammar(json::object());
  EXPECT_TRUE(accepts(*anything, R"([1, "a", {"b": null}])"));
  EXPECT_TRUE(accepts(*anything, "-0.5"));
}

TEST(JsonSchemaGrammar, RefusesUnsupportedSchemasNamingTheKeyword) {
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "^a"})", "pattern", "/pattern"},
      {R"({"type": "object", "properties": {"n": {"type": "number", "minimum": 0}}})", "minimum", "/properties/n/minimum"},
      {R"({"type": "object", "required": ["x"]})", "required property 'x'", "/required/0"},
      {R"({"type": "strin"})", "unknown type 'strin'", "/type"},
      {R"({"$ref": "#/elsewhere"})", "#/elsewhere", "/$ref"},
      {R"({"enum": []})", "non-empty", "/enum"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems", ""},
      {R"({"allOf": [{}]})", "allOf", "/allOf"},
  };
  for (const auto& [schema, what, where] : cases) {
    Grammar g;
    try {
      compile_schema(g, json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(e.where(), where) << schema;
    }
  }
  // Alternatives that start alike are told apart only by later bytes: refused when finished.
  Grammar g;
  const int32_t root = compile_schema(g, json::parse(R"({"anyOf": [{"type": "object"}, {"type": "object", "properties": {}}]})"));
  try {
    g.finish(root);
    ADD_FAILURE() << "two objects in anyOf accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("start with '{'"), std::string::npos) << e.what();
  }
}

// A vocabulary of JSON fragments: single characters, multi-byte pieces, pieces that cross
// structure, a two-byte character, byte tokens, BOS/EOS.
model::Tokenizer tiny_tokenizer() {
  model::VocabData v;
  v.model = "llama";
  v.add_space_prefix = false;
  v.tokens = {"<unk>", "<s>", "</s>", "<0x0A>", "<0x22>", "<0x7B>", "{", "}", "[", "]", "\"", ":", ",", "▁", "▁▁▁▁",
              "a", "b", "x", "1", "0", "-", ".", "e", "12", "\"a\"", "{\"", "\":", "\",", "\"}", "true", "tr", "ue",
              "null", "\\", "n", "u", "é", "ab\"", "}}", "]}", "1.5", "\":\"", "\"b", "▁{\"", "f", "alse", "name", "age"};
  // Every lowercase letter and digit, so that any property name and number can be spelt (real
  // vocabularies have a token for every byte).
  for (char c : std::string_view("abcdefghijklmnopqrstuvwxyz0123456789"))
    if (std::find(v.tokens.begin(), v.tokens.end(), std::string(1, c)) == v.tokens.end()) v.tokens.emplace_back(1, c);
  v.kinds.assign(v.tokens.size(), model::TokenKind::Normal);
  v.kinds[0] = model::TokenKind::Unknown;
  v.kinds[1] = v.kinds[2] = model::TokenKind::Control;
  for (size_t i = 3; i <= 5; ++i) v.kinds[i] = model::TokenKind::Byte;
  v.unknown = 0;
  v.bos = 1;
  v.eos = 2;
  return model::Tokenizer::from_vocab(v);
}

// Every state reached along the documents is masked, and the mask is compared with trying each
// token's bytes on a copy of the state.
void check_mask_by_brute_force(const Grammar& g, const model::Tokenizer& tok, const std::vector<std::string>& docs) {
  TokenTrie trie(tok);
  std::vector<Recognizer> scratch(trie.max_token_bytes() + 1, Recognizer(g));
  std::vector<uint8_t> allowed(static_cast<size_t>(tok.vocab_size()));
  size_t checked = 0, states = 0;
  for (const std::string& doc : docs) states += doc.size() + 1;
  for (const std::string& doc : docs) {
    Recognizer state(g);
    for (size_t i = 0; i <= doc.size(); ++i) {
      const int32_t count = trie.mask(state, allowed, scratch);
      int32_t expected_count = 0;
      for (model::TokenId t = 0; t < tok.vocab_size(); ++t) {
        bool ok = false;
        if (tok.is_end_of_generation(t)) {
          ok = state.complete();
        } else if (!tok.token_bytes(t).empty()) {
          Recognizer copy(state);
          ok = copy.feed(tok.token_bytes(t));
        }
        expected_count += ok ? 1 : 0;
        EXPECT_EQ(allowed[static_cast<size_t>(t)] != 0, ok) << "token '" << tok.token_bytes(t) << "' after '" << doc.substr(0, i) << "'";
      }
      EXPECT_EQ(count, expected_count);
      ++checked;
      if (i < doc.size()) {
        ASSERT_TRUE(state.feed(static_cast<uint8_t>(doc[i]))) << doc.substr(0, i + 1);
      }
    }
  }
  EXPECT_EQ(checked, states);
}

TEST(TokenMask, EqualsBruteForceOnATinyVocabulary) {
  const model::Tokenizer tok = tiny_tokenizer();
  check_mask_by_brute_force(*free_object(), tok,
                            {R"({"a": [1, 12, -0.5e1, true, null, "x\né"], "b": {}})", "{\n  \"ab\":false}", R"( {"":"\u00e9"})"});
  check_mask_by_brute_force(*schema_grammar(kPerson), tok,
                            {R"({"name": "ab", "age": 12, "tags": ["a"]})", R"({"age":1,"kind":null,"name":"x","ok":true})"});
  check_mask_by_brute_force(*schema_grammar(json::parse(R"({"enum": [1, 12, "ab"]})")), tok, {"12", R"("ab")"});
}

TEST(TokenMask, MaskedSamplingFollowsTheGrammarForEverySetting) {
  const model::Tokenizer tok = tiny_tokenizer();
  auto constraint = std::make_shared<Constraint>(Constraint{schema_grammar(kPerson), std::make_shared<TokenTrie>(tok)});
  std::vector<float> logits(static_cast<size_t>(tok.vocab_size()));
  for (const model::SamplerOptions& options : {model::SamplerOptions{1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 7},
                                               model::SamplerOptions{0.0f, 40, 0.95f, 0.05f, 1.0f, 64, 1},
                                               model::SamplerOptions{1.5f, 5, 0.9f, 0.1f, 1.3f, 16, 3}}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      model::SamplerOptions o = options;
      o.seed = seed;
      model::Sampler sampler(o, tok.vocab_size());
      Matcher matcher(constraint, tok);
      std::string text;
      uint64_t z = seed * 977 + 1;
      for (int step = 0; step < 400 && !matcher.finished(); ++step) {
        for (float& l : logits) l = static_cast<float>((z = z * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 1e6f;
        const model::TokenId t = sampler.sample(matcher.mask(logits.data()));
        matcher.accept(t);
        if (tok.is_end_of_generation(t)) break;
        text += tok.token_bytes(t);
      }
      ASSERT_TRUE(matcher.complete()) << text;
      const json doc = json::parse(text);
      EXPECT_TRUE(doc.is_object() && doc.contains("name") && doc.contains("age") && doc["age"].is_number_integer()) << text;
      EXPECT_LE(doc["name"].get<std::string>().size(), 5u * 2) << text;
    }
  }
}

TEST(Sampler, NeverChoosesAMaskedToken) {
  std::vector<float> logits(100, 5.0f);
  for (size_t i = 0; i < logits.size(); ++i)
    if (i % 7 != 3) logits[i] = -std::numeric_limits<float>::infinity();
  model::Sampler sampler({1.0f, 0, 1.0f, 0.0f, 1.2f, 64, 11}, 100);
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(sampler.sample(logits.data()) % 7, 3);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  EXPECT_THROW(sampler.sample(logits.data()), Error);
}

const std::vector<ToolFunction> kTools = {
    {"get_weather", "Weather of a city", json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
      "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false})")},
    {"get_time", "", json()},
};

TEST(ToolCalls, GrammarAcceptsExactlyCallsOfTheAllowedFunctions) {
  auto hermes = tool_call_grammar(ToolStyle::Hermes, kTools);
  Recognizer r(*hermes);
  ASSERT_TRUE(r.feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>"));
  EXPECT_TRUE(r.finished());
  EXPECT_TRUE(accepts(*hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city
  EXPECT_FALSE(accepts(*hermes, "<tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>"));
  auto llama3 = tool_call_grammar(ToolStyle::Llama3, std::span(kTools).subspan(1));
  EXPECT_TRUE(accepts(*llama3, R"({"name": "get_time", "parameters": {}})"));
  EXPECT_FALSE(accepts(*llama3, R"({"name": "get_weather", "parameters": {"city": "x"}})"));
}

// A reply fed to the parser in pieces, and what came out, checked against OpenAI's streaming
// shape: each call's first piece has its id and name, later pieces only arguments, and the
// pieces' arguments add up to the call's.
struct Streamed {
  std::string content, reasoning;
  std::vector<ChatToolCall> calls;  // from finish()
  std::vector<ChatToolCall> pieced;  // assembled from the deltas
  size_t argument_pieces = 0;
};

Streamed stream(ToolStyle style, std::string_view reply, const std::vector<size_t>& cuts, ReplyOptions options = {}) {
  ToolCallParser p(style, "call_", options);
  Streamed out;
  auto take = [&](const ReplyDelta& d) {
    out.content += d.content;
    out.reasoning += d.reasoning;
    for (const ToolCallDelta& c : d.calls) {
      if (c.index == static_cast<int>(out.pieced.size())) {
        EXPECT_FALSE(c.id.empty());
        EXPECT_FALSE(c.name.empty());
        out.pieced.push_back({c.id, c.name, c.arguments});
      } else {
        EXPECT_EQ(c.index, static_cast<int>(out.pieced.size()) - 1);
        EXPECT_TRUE(c.id.empty() && c.name.empty());
        out.pieced.back().arguments += c.arguments;
      }
      if (!c.arguments.empty()) ++out.argument_pieces;
    }
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    take(p.push(reply.substr(at, cut - at)));
    at = cut;
  }
  take(p.push(reply.substr(at)));
  ToolCallParser::Finished f = p.finish();
  take(f.last);
  out.calls = f.calls;
  EXPECT_EQ(out.calls.size(), out.pieced.size());
  for (size_t i = 0; i < std::min(out.calls.size(), out.pieced.size()); ++i) {
    EXPECT_EQ(out.calls[i].id, out.pieced[i].id);
    EXPECT_EQ(out.calls[i].name, out.pieced[i].name);
    EXPECT_EQ(out.calls[i].arguments, out.pieced[i].arguments);
  }
  return out;
}

std::vector<size_t> every_byte(std::string_view s) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < s.size(); ++i) cuts.push_back(i);
  return cuts;
}

// Each style's hand-written reply, cut at every byte and byte by byte: the same content, the
// same calls, and arguments that stream in more than one piece.
void expect_calls_at_every_cut(ToolStyle style, std::string_view reply, const std::string& content,
                               const std::vector<std::pair<std::string, json>>& calls, const std::string& reasoning = "",
                               bool streams = true, ReplyOptions options = {}) {
  for (size_t cut = 0; cut <= reply.size() + 1; ++cut) {
    const Streamed s = cut <= reply.size() ? stream(style, reply, {cut}, options) : stream(style, reply, every_byte(reply), options);
    EXPECT_EQ(s.content, content) << cut;
    EXPECT_EQ(s.reasoning, reasoning) << cut;
    ASSERT_EQ(s.calls.size(), calls.size()) << cut;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].id, "call_" + std::to_string(i));
      EXPECT_EQ(s.calls[i].name, calls[i].first) << cut;
      EXPECT_EQ(json::parse(s.calls[i].arguments), calls[i].second) << cut << " " << s.calls[i].arguments;
    }
    if (cut > reply.size() && streams && !calls.empty()) {
      EXPECT_GT(s.argument_pieces, calls.size());
    }
  }
  const ToolCallParser::Result whole = ToolCallParser(style, "call_", options).whole(reply);
  EXPECT_EQ(whole.calls.size(), calls.size());
  EXPECT_EQ(whole.reasoning, reasoning);
  if (calls.empty()) {
    EXPECT_EQ(whole.content, content);
  }
}

TEST(ToolCalls, ParsesCallsWholeAndStreamedAtEveryCut) {
  expect_calls_at_every_cut(ToolStyle::Hermes,
                            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{}\"}\n</tool_call>",
                            "Let me check.\n", {{"get_weather", {{"city", "Oslo"}}}, {"get_time", json::object()}});
  // Arguments stream as written: the pieces add up to the model's own text.
  const Streamed bytes = stream(ToolStyle::Hermes, R"(<tool_call>{"name": "f", "arguments": {"a": [1, {"b": "}"}]}}</tool_call>)",
                                every_byte(R"(<tool_call>{"name": "f", "arguments": {"a": [1, {"b": "}"}]}}</tool_call>)"));
  ASSERT_EQ(bytes.calls.size(), 1u);
  EXPECT_EQ(bytes.calls[0].arguments, R"({"a": [1, {"b": "}"}]})");
  // Keys in another order don't stream but are read whole at the end.
  const Streamed swapped = stream(ToolStyle::Hermes, R"(<tool_call>{"arguments": {"x": 1}, "name": "f"}</tool_call>)", {5, 20});
  ASSERT_EQ(swapped.calls.size(), 1u);
  EXPECT_EQ(json::parse(swapped.calls[0].arguments), json::parse(R"({"x": 1})"));

  // Text that only looks like a call's start is content.
  const Streamed fake = stream(ToolStyle::Hermes, "a <toolbox> b <tool_call>{not json}", {7, 20});
  EXPECT_TRUE(fake.calls.empty());
  EXPECT_EQ(fake.content, "a <toolbox> b <tool_call>{not json}");

  expect_calls_at_every_cut(ToolStyle::Llama3, R"( {"name": "get_time", "parameters": {"tz": "UTC"}} )", "",
                            {{"get_time", {{"tz", "UTC"}}}});
  expect_calls_at_every_cut(ToolStyle::Llama3, R"(<|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}})", "",
                            {{"get_time", {{"tz", "UTC"}}}});
  EXPECT_TRUE(parse_tool_calls(ToolStyle::Llama3, "The time is now.", "x").empty());
  ToolCallParser plain(ToolStyle::Llama3, "c");
  EXPECT_EQ(plain.push("  Hello").content, "  Hello");
  EXPECT_EQ(plain.push(" {x}").content, " {x}");
}

// Replies as Mistral's, DeepSeek's and gpt-oss's models write them (their model cards and chat
// templates), parsed at every cut.
TEST(ToolCalls, ParsesMistralDeepSeekAndHarmonyCalls) {
  expect_calls_at_every_cut(ToolStyle::Mistral,
                            R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}, "id": "a1b2c3d4e"}, )"
                            R"({"name": "get_time", "arguments": {}}])",
                            "", {{"get_weather", {{"city", "Oslo"}, {"unit", "c"}}}, {"get_time", json::object()}});
  expect_calls_at_every_cut(ToolStyle::Mistral, "Sure. [TOOL_CALLS][{\"arguments\": {\"tz\": \"UTC\"}, \"name\": \"get_time\"}]", "Sure. ",
                            {{"get_time", {{"tz", "UTC"}}}}, "", false);
  EXPECT_TRUE(parse_tool_calls(ToolStyle::Mistral, "[TOOL_CALLS] not a list", "x").empty());
  // Mistral's v11 tokenizers: [TOOL_CALLS]NAME[ARGS]{...} per call, the model's call id optional
  // (Mistral Small 3.2's and Devstral's chat templates write both).
  expect_calls_at_every_cut(ToolStyle::Mistral,
                            R"(Checking. [TOOL_CALLS]get_weather[ARGS]{"city": "Oslo", "unit": "c"})"
                            R"([TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"tz": "UTC"})",
                            "Checking. ", {{"get_weather", {{"city", "Oslo"}, {"unit", "c"}}}, {"get_time", {{"tz", "UTC"}}}});
  expect_calls_at_every_cut(ToolStyle::Mistral, "[TOOL_CALLS]get_time[ARGS]{}", "", {{"get_time", json::object()}}, "", false);
  EXPECT_EQ(ToolCallParser(ToolStyle::Mistral, "x").whole("[TOOL_CALLS]get time[ARGS]{}").content, "[TOOL_CALLS]get time[ARGS]{}");
  EXPECT_EQ(ToolCallParser(ToolStyle::Mistral, "x").whole("[TOOL_CALLS]get_time[OOPS]{}").content, "[TOOL_CALLS]get_time[OOPS]{}");

  expect_calls_at_every_cut(ToolStyle::DeepSeek,
                            "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                            "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
                            "{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                            "Checking.", {{"get_weather", {{"city", "Oslo"}}}, {"get_time", json::object()}});
  // V3.1 writes the name first, then the arguments without a code fence. Spacing before the
  // calls is no content.
  expect_calls_at_every_cut(ToolStyle::DeepSeek,
                            "\r <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜>"
                            "<｜tool▁calls▁end｜>",
                            "", {{"get_weather", {{"city", "Oslo"}}}});
  EXPECT_EQ(ToolCallParser(ToolStyle::DeepSeek, "x").whole("<｜tool▁calls▁begin｜>oops").content, "<｜tool▁calls▁begin｜>oops");

  // Harmony: the analysis channel is reasoning, the final channel content; a commentary message
  // to=functions.NAME is a call (its <|call|> ends generation, so the text stops there).
  expect_calls_at_every_cut(ToolStyle::Harmony,
                            "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                            "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
                            "", {{"get_weather", {{"city", "Oslo"}}}}, "Need the weather.");
  // The recipient may stand in the role's header; <|end|> is not in the text (a control token).
  expect_calls_at_every_cut(ToolStyle::Harmony,
                            "<|channel|>analysis<|message|>Time.<|start|>assistant to=functions.get_time<|channel|>commentary json"
                            "<|message|>{\"tz\": \"UTC\"}<|call|>",
                            "", {{"get_time", {{"tz", "UTC"}}}}, "Time.");
  expect_calls_at_every_cut(ToolStyle::Harmony,
                            "<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>"
                            "Hello! <|tricky|> 1<2",
                            "Hello! <|tricky|> 1<2", {}, "User greets. Reply.");
  // A model that ignores the format: its text is content.
  EXPECT_EQ(ToolCallParser(ToolStyle::Harmony, "x").whole("Just text.").content, "Just text.");
}

// DeepSeek R1's and Qwen3's replies open with <think>...</think>: that block is reasoning (no tags,
// no spacing around it), the rest content or calls, at every cut.
TEST(ToolCalls, AThinkBlockIsReasoning) {
  const ReplyOptions think{.calls = false, .think_tags = true};
  expect_calls_at_every_cut(ToolStyle::DeepSeek, "<think>\nThe user greets me.\n\nI greet back.\n</think>\n\nHello! <think>x</think>",
                            "Hello! <think>x</think>", {}, "The user greets me.\n\nI greet back.", true, think);
  expect_calls_at_every_cut(ToolStyle::Hermes, "\n<think>\n\n</think>\n\n2 + 2 = 4.", "2 + 2 = 4.", {}, "", true, think);
  // Only a reply that opens with it thinks; without think_tags the block is content.
  expect_calls_at_every_cut(ToolStyle::Hermes, "Hi <think>no</think>", "Hi <think>no</think>", {}, "", true, think);
  expect_calls_at_every_cut(ToolStyle::Hermes, "<think>a</think>b", "<think>a</think>b", {}, "", true, ReplyOptions{.calls = false});
  // A reply cut short while thinking (max_tokens) is all reasoning; <thin alone is content.
  expect_calls_at_every_cut(ToolStyle::DeepSeek, "<think>Let me see, 17 is", "", {}, "Let me see, 17 is", true, think);
  expect_calls_at_every_cut(ToolStyle::DeepSeek, "<thin", "<thin", {}, "", true, think);
  // Without calls asked for, a call's markup is content; with them, calls follow the thinking.
  expect_calls_at_every_cut(ToolStyle::Hermes, "<think>no tools</think><tool_call>{}</tool_call>", "<tool_call>{}</tool_call>", {},
                            "no tools", true, think);
  expect_calls_at_every_cut(ToolStyle::Hermes,
                            "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                            "{\"city\": \"Oslo\"}}\n</tool_call>",
                            "", {{"get_weather", {{"city", "Oslo"}}}}, "Need the weather.", true, ReplyOptions{.think_tags = true});
}

// DeepSeek R1's newer template (and QwQ's) ends the prompt in "<think>\n": the reply starts
// inside its reasoning and has no <think> of its own, at every cut.
TEST(ToolCalls, AReplyAfterAnOpenedThinkBlockStartsInItsReasoning) {
  const ReplyOptions open{.calls = false, .think_tags = true, .thinking_open = true};
  expect_calls_at_every_cut(ToolStyle::DeepSeek, "The user greets me.\n\nI greet back.\n</think>\n\nHello!", "Hello!", {},
                            "The user greets me.\n\nI greet back.", true, open);
  expect_calls_at_every_cut(ToolStyle::Hermes, "\n</think>\n\n2 + 2 = 4.", "2 + 2 = 4.", {}, "", true, open);
  // Cut short while thinking (max_tokens, Ctrl-C): all of it is reasoning.
  expect_calls_at_every_cut(ToolStyle::DeepSeek, "Let me see, 17 is", "", {}, "Let me see, 17 is", true, open);
  // With calls asked for, they follow the thinking.
  expect_calls_at_every_cut(ToolStyle::Hermes,
                            "Need the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                            "{\"city\": \"Oslo\"}}\n</tool_call>",
                            "", {{"get_weather", {{"city", "Oslo"}}}}, "Need the weather.", true,
                            ReplyOptions{.think_tags = true, .thinking_open = true});
}

// Each style's grammar for tool_choice "required" writes a call that its parser reads back.
TEST(ToolCalls, EveryStylesRequiredCallParsesBack) {
  const std::vector<std::pair<ToolStyle, std::string>> cases = {
      {ToolStyle::Mistral, R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}])"},
      {ToolStyle::MistralV11, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"})"},
      {ToolStyle::DeepSeek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>"},
      {ToolStyle::Harmony, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"},
  };
  for (const auto& [style, text] : cases) {
    auto g = tool_call_grammar(style, kTools);
    EXPECT_TRUE(accepts(*g, text)) << text;
    EXPECT_FALSE(accepts(*g, text.substr(0, text.size() - 1) + "x")) << text;
    // No spacing inside the format's markers (the grammar allows it before values only).
    std::string spaced = text;
    spaced.insert(spaced.find("get_weather"), "\r ");
    EXPECT_FALSE(accepts(*g, spaced)) << spaced;
    const std::vector<ChatToolCall> calls = parse_tool_calls(style, text, "c");
    ASSERT_EQ(calls.size(), 1u) << text;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"city": "Oslo"})"));
  }
}

TEST(ToolCalls, RendersToolsCallsAndResultsInTheTemplatesStyle) {
  std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Weather in Oslo?"}, {"assistant", ""},
                                       {"tool", "{\"temp\": 3}"}, {"tool", "12:00"}};
  messages[2].tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo"})"}, {"call_2", "get_time", "{}"}};
  const std::vector<ChatMessage> hermes = render_tool_turns(ToolStyle::Hermes, messages, kTools);
  ASSERT_EQ(hermes.size(), 4u);
  EXPECT_TRUE(hermes[0].content.starts_with("Be brief.\n\n# Tools\n"));
  EXPECT_NE(hermes[0].content.find(R"({"type":"function","function":{"name":"get_weather","description":"Weather of a city")"),
            std::string::npos);
  EXPECT_EQ(hermes[2].content,
            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>");
  EXPECT_EQ(hermes[3].role, "user");
  EXPECT_EQ(hermes[3].content, "<tool_response>\n{\"temp\": 3}\n</tool_response>\n<tool_response>\n12:00\n</tool_response>");
  EXPECT_EQ(render_chat(ChatFamily::ChatML, hermes, "", "").find("<|im_start|>user\n<tool_response>"), 
            render_chat(ChatFamily::ChatML, hermes, "", "").rfind("<|im_start|>user\n"));

  const std::vector<ChatMessage> llama3 = render_tool_turns(ToolStyle::Llama3, messages, kTools);
  ASSERT_EQ(llama3.size(), 5u);
  EXPECT_TRUE(llama3[1].content.starts_with("Given the following functions"));
  EXPECT_TRUE(llama3[1].content.ends_with("\n\nWeather in Oslo?"));
  EXPECT_EQ(llama3[2].content, "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}\n{\"name\":\"get_time\",\"parameters\":{}}");
  EXPECT_EQ(llama3[3].role, "ipython");
  EXPECT_NE(render_chat(ChatFamily::Llama3, llama3, "", "").find("<|start_header_id|>ipython<|end_header_id|>\n\n12:00<|eot_id|>"),
            std::string::npos);
}

// The formats' own renderings of tools, calls and results, written out by hand from their chat
// templates (Mistral v3, DeepSeek V3, gpt-oss).
TEST(ToolCalls, RendersMistralDeepSeekAndHarmonyTurns) {
  std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Weather in Oslo?"}, {"assistant", ""},
                                       {"tool", "{\"temp\": 3}"}, {"tool", "12:00"}};
  messages[2].tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo"})"}, {"call_2", "get_time", "{}"}};
  messages[3].tool_call_id = "call_1";
  messages[4].tool_call_id = "call_2";
  const std::span<const ToolFunction> time_only = std::span(kTools).subspan(1);

  EXPECT_EQ(render_chat(ChatFamily::Mistral, render_tool_turns(ToolStyle::Mistral, messages, time_only), "<s>", "</s>"),
            R"([AVAILABLE_TOOLS] [{"type":"function","function":{"name":"get_time","parameters":{}}}][/AVAILABLE_TOOLS])"
            "[INST] Be brief.\n\nWeather in Oslo? [/INST]"
            R"([TOOL_CALLS] [{"name":"get_weather","arguments":{"city":"Oslo"},"id":"call_1"},{"name":"get_time","arguments":{},"id":"call_2"}]</s>)"
            R"([TOOL_RESULTS] {"content":"{\"temp\": 3}","call_id":"call_1"}[/TOOL_RESULTS])"
            R"([TOOL_RESULTS] {"content":"12:00","call_id":"call_2"}[/TOOL_RESULTS])");
  // Mistral's v11 templates (Mistral Small 3.2, Devstral): a call is NAME[ARGS]{...}, a result its text.
  EXPECT_EQ(tool_style(ChatFamily::Mistral, "{{- '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + arguments }}"), ToolStyle::MistralV11);
  EXPECT_EQ(tool_style(ChatFamily::Mistral, "{{- '[TOOL_CALLS] ' + tool_calls|tojson }}"), ToolStyle::Mistral);
  EXPECT_EQ(render_chat(ChatFamily::Mistral, render_tool_turns(ToolStyle::MistralV11, messages, time_only), "<s>", "</s>"),
            R"([AVAILABLE_TOOLS][{"type":"function","function":{"name":"get_time","parameters":{}}}][/AVAILABLE_TOOLS])"
            "[INST] Be brief.\n\nWeather in Oslo? [/INST]"
            R"([TOOL_CALLS]get_weather[ARGS]{"city":"Oslo"}[TOOL_CALLS]get_time[ARGS]{}</s>)"
            R"([TOOL_RESULTS]{"temp": 3}[/TOOL_RESULTS][TOOL_RESULTS]12:00[/TOOL_RESULTS])");
  // Their templates (Mistral Small 3.2's, Devstral's) also write the system text in its tags and
  // the user turn without spaces: [SYSTEM_PROMPT]...[/SYSTEM_PROMPT], then [AVAILABLE_TOOLS] right
  // before the last [INST]...[/INST].
  EXPECT_EQ(render_chat(ChatFamily::Mistral, render_tool_turns(ToolStyle::MistralV11, messages, time_only), "<s>", "</s>",
                        {.system_prompt_tags = true}),
            "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT]"
            R"([AVAILABLE_TOOLS][{"type":"function","function":{"name":"get_time","parameters":{}}}][/AVAILABLE_TOOLS])"
            "[INST]Weather in Oslo?[/INST]"
            R"([TOOL_CALLS]get_weather[ARGS]{"city":"Oslo"}[TOOL_CALLS]get_time[ARGS]{}</s>)"
            R"([TOOL_RESULTS]{"temp": 3}[/TOOL_RESULTS][TOOL_RESULTS]12:00[/TOOL_RESULTS])");

  EXPECT_EQ(render_chat(ChatFamily::DeepSeek, render_tool_turns(ToolStyle::DeepSeek, messages, time_only), "", "<｜end▁of▁sentence｜>"),
            "Be brief.\n\n## Tools\n\nYou have access to the following tools:\n\n### get_time\n\nParameters: {}\n\n"
            "To call tools, answer in exactly this form, one <｜tool▁call▁begin｜>...<｜tool▁call▁end｜> block per call:\n"
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            "<｜User｜>Weather in Oslo?<｜Assistant｜><｜tool▁calls▁begin｜>"
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Oslo\"}\n```<｜tool▁call▁end｜>\n"
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{\"temp\": 3}<｜tool▁output▁end｜>\n"
            "<｜tool▁output▁begin｜>12:00<｜tool▁output▁end｜><｜tool▁outputs▁end｜><｜Assistant｜>");

  EXPECT_EQ(render_chat(ChatFamily::Harmony, render_tool_turns(ToolStyle::Harmony, messages, kTools), "", ""),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
            "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
            "Calls to these tools must go to the commentary channel: 'functions'.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
            "// Weather of a city\ntype get_weather = (_: {\ncity: string,\nunit?: \"c\" | \"f\",\n}) => any;\n\n"
            "type get_time = () => any;\n\n} // namespace functions<|end|>"
            "<|start|>user<|message|>Weather in Oslo?<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>"
            "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>"
            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"temp\": 3}<|end|>"
            "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>12:00<|end|>"
            "<|start|>assistant");
}

// JSON Schema in Harmony's TypeScript-like declarations: descriptions as comments, optional
// properties with '?', enums as unions, arrays, nested objects, defaults.
TEST(ToolCalls, HarmonyNamespaceWritesSchemasAsTypes) {
  const std::vector<ToolFunction> tools = {{"search", "Search the web.\nUse sparingly.", json::parse(R"({"type": "object",
      "properties": {"query": {"type": "string", "description": "What to look for"},
                     "limit": {"type": "integer", "default": 5},
                     "tags": {"type": "array", "items": {"type": ["string", "null"]}},
                     "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}},
      "required": ["query"]})")}};
  EXPECT_EQ(harmony_namespace(tools),
            "// Search the web.\n// Use sparingly.\ntype search = (_: {\nlimit?: number, // default: 5\n// What to look for\nquery: string,\n"
            "tags?: (string | null)[],\nwhere?: {\n  lat: number,\n},\n}) => any;\n\n");
}

// The scheduler holds a request to its constraint: the fake model's favourite token is refused
// unless the grammar allows it, end-of-generation waits for a whole document, and generation
// ends by itself once nothing can follow.
std::string constrained(testing::FakeEngine& engine, const std::vector<std::string>& words, Usage* usage = nullptr) {
  auto g = std::make_shared<Grammar>();
  g->finish(g->literals(words));
  Metrics metrics;
  Scheduler s(engine, metrics);
  GenerationRequest r;
  r.prompt = testing::letters("abc");
  r.max_tokens = 50;
  r.constraint = std::make_shared<Constraint>(Constraint{g, std::make_shared<TokenTrie>(engine.tokenizer())});
  auto job = s.submit(std::move(r));
  std::string text;
  for (int round = 0; round < 100; ++round) {
    JobUpdate u = job->wait(std::chrono::milliseconds(0));
    text += u.text;
    if (u.finished) {
      EXPECT_EQ(u.finish_reason, FinishReason::Stop) << u.error;
      if (usage) *usage = u.usage;
      return text;
    }
    s.step();
  }
  ADD_FAILURE() << "did not finish: " << text;
  return text;
}

TEST(ConstrainedScheduling, TheGrammarOverridesTheModelAndEndsGeneration) {
  testing::FakeEngine letters(1);  // wants the next letter: d after abc
  Usage usage;
  EXPECT_EQ(constrained(letters, {"cab"}, &usage), "cab");
  EXPECT_EQ(usage.completion_tokens, 3);  // no end-of-generation token: the document was finished
  EXPECT_EQ(constrained(letters, {"ab", "abc"}), "abc");  // after "ab" the model's "c" is allowed

  testing::FakeEngine eos(1, 256, 512, [](model::TokenId, int32_t) { return testing::kEos; });  // wants to stop at once
  EXPECT_EQ(constrained(eos, {"ab", "abcd"}, &usage), "ab");
  EXPECT_EQ(usage.completion_tokens, 3);  // a, b, then the end-of-generation token it was allowed
}

}  // namespace
}  // namespace orchard::serve::structured

namespace orchard::serve::openai {
namespace {

using nlohmann::json;

ApiError error_of(const std::string& body) {
  try {
    parse_request(Endpoint::ChatCompletions, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

std::string chat_with(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
}

TEST(StructuredRequests, ParseResponseFormatsAndTools) {
  EXPECT_EQ(parse_request(Endpoint::ChatCompletions, chat_with(R"("response_format": {"type": "text"})")).format, nullptr);
  EXPECT_NE(parse_request(Endpoint::ChatCompletions, chat_with(R"("response_format": {"type": "json_object"})")).format, nullptr);
  ApiRequest r = parse_request(Endpoint::ChatCompletions, chat_with(R"(
    "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}}},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false)"));
  ASSERT_NE(r.format, nullptr);
  structured::Recognizer rec(*r.format);
  EXPECT_TRUE(rec.feed(R"({"a": 1})") && rec.finished());
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.tool_name, "f");

  r = parse_request(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
}

TEST(StructuredRequests, RefuseWhatCannotBeHonouredNamingIt) {
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "string", "format": "date"}}})",
       "response_format.json_schema.schema", "'format'"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})", "response_format.json_schema.name", "required"},
      {R"("response_format": {"type": "yaml"})", "response_format.type", "yaml"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}}}])",
       "tools[0].function.parameters", "'pattern'"},
      {R"("tools": [{"type": "function", "function": {"name": "bad name"}}])", "tools[0].function.name", "letters"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
       "tools[1].function.name", "two tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})",
       "tool_choice.function.name", "'g'"},
      {R"("tool_choice": "required")", "tool_choice", "empty"},
      {R"("tool_choice": "sometimes")", "tool_choice", "sometimes"},
  };
  for (const auto& [extra, param, text] : cases) {
    const ApiError e = error_of(chat_with(extra));
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(e.param(), param) << extra;
    EXPECT_NE(e.message().find(text), std::string::npos) << e.message();
  }
  const ApiError tool_without_id = error_of(R"({"messages": [{"role": "tool", "content": "x"}]})");
  EXPECT_EQ(tool_without_id.param(), "messages[0].tool_call_id");
}

TEST(StructuredRequests, BodiesCarryToolCalls) {
  const ResponseMeta meta{"chatcmpl-1", 5, "m"};
  const std::vector<ChatToolCall> calls = {{"call_0", "f", R"({"a":1})"}};
  const json whole = json::parse(completion_body(Endpoint::ChatCompletions, meta, "", FinishReason::Stop, {3, 4}, calls));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(whole["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(whole["choices"][0]["message"]["tool_calls"][0],
            json::parse(R"({"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}})"));
  StreamWriter writer(Endpoint::ChatCompletions, meta, false);
  // A call's first piece names it; a later one (with reasoning and content before it) carries
  // only its index and more arguments, each kind in an event of its own, as OpenAI's are.
  const std::string first = writer.delta({"", "", {{0, "call_0", "f", ""}}});
  const json chunk = json::parse(first.substr(6));
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0],
            json::parse(R"({"index": 0, "id": "call_0", "type": "function", "function": {"name": "f", "arguments": ""}})"));
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  const std::string later = writer.delta({"hm", "ok", {{0, "", "", R"({"a":)"}}});
  std::vector<json> events;
  for (size_t at = 0; (at = later.find("data: ", at)) != std::string::npos; at += 6)
    events.push_back(json::parse(later.substr(at + 6, later.find("\n\n", at) - at - 6)));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json::parse(R"({"reasoning_content": "hm"})"));
  EXPECT_EQ(events[1]["choices"][0]["delta"], json::parse(R"({"content": "ok"})"));
  EXPECT_EQ(events[2]["choices"][0]["delta"]["tool_calls"][0], json::parse(R"({"index": 0, "function": {"arguments": "{\"a\":"}})"));
  EXPECT_EQ(writer.delta({}), "");
  EXPECT_NE(writer.end(FinishReason::Stop, {}, true).find(R"("finish_reason":"tool_calls")"), std::string::npos);
  // Reasoning in a whole answer is message.reasoning_content.
  const json reasoned = json::parse(completion_body(Endpoint::ChatCompletions, meta, "Hi", FinishReason::Stop, {3, 4}, {}, "think"));
  EXPECT_EQ(reasoned["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "Hi", "reasoning_content": "think"})"));
}

}  // namespace
}  // namespace orchard::serve::openai
