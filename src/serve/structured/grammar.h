#pragma once
// Grammars for constrained sampling: a graph of JSON value kinds (what a JSON schema, free
// JSON, or a tool call's syntax allows) and an incremental recognizer over bytes, a pushdown
// automaton whose state is a small stack of frames, cheap to copy, so that the token mask can
// try every vocabulary entry against it.
//
// Every prefix the recognizer accepts can be completed into a whole document: it refuses a byte
// as soon as no completion remains (a '}' before every required property, a key that names no
// unseen property, a ',' after the last allowed array item). Documents are bounded so random
// sampling cannot go on forever inside one token class: at most kMaxWhitespace consecutive
// whitespace bytes, numbers of at most kMaxIntegerDigits/kMaxFractionDigits/kMaxExponentDigits
// digits, nesting at most kMaxDepth deep. Nothing but the end may follow the root value.
#include <array>
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace orchard::serve::structured {

constexpr int kMaxWhitespace = 8;
constexpr int kMaxIntegerDigits = 16;
constexpr int kMaxFractionDigits = 16;
constexpr int kMaxExponentDigits = 2;  // 16 digits × 10^99 stays far inside a double
constexpr int kMaxDepth = 48;       // frames of the recognizer's stack
constexpr int kMaxProperties = 64;  // per object schema (a bit each in the recognizer)

// A set of byte strings (enum values as JSON text, property names, tool-call openings), as a
// trie. Entries are numbered in the order added.
struct Trie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // by byte, ascending
    int32_t entry = -1;                                 // the entry ending here, else -1
    uint64_t below = 0;  // bit i: entry i (< 64) ends at or below this node
  };
  std::vector<Node> nodes{Node{}};  // 0: the root
  int32_t entries = 0;

  // Adds `bytes` (not empty, not yet present); returns its entry number.
  int32_t add(std::string_view bytes);
  int32_t child(int32_t node, uint8_t byte) const;  // -1 when none
};

struct GrammarNode {
  enum class Kind : uint8_t {
    Any,       // any JSON value (objects' values and array items any again)
    Object,
    Array,
    String,
    Number,
    Integer,
    Literal,   // one of the trie's entries, byte for byte (enum, const, true/false/null, fixed text)
    Union,     // one of `parts`, told apart by the value's first byte
    Sequence,  // `parts` one after the other
  };
  Kind kind = Kind::Any;
  // Object: properties (name trie entry i ↔ properties[i]), required and seen as bits.
  std::vector<int32_t> properties;
  int32_t names = -1;                // trie of the property names as JSON text without the opening quote
  uint64_t required = 0;
  int32_t additional = -1;           // node of other properties' values; -1: none allowed
  // Array
  int32_t items = -1;
  int64_t min_items = 0, max_items = INT64_MAX;
  // String: lengths in characters (an escape is one)
  int64_t min_length = 0, max_length = INT64_MAX;
  bool escapes = true;               // false: no backslash (schema objects' free keys)
  // Literal: a trie; `then[i]` is the node that follows entry i (-1: the value ends with it)
  int32_t trie = -1;
  std::vector<int32_t> then;
  // Union, Sequence
  std::vector<int32_t> parts;
  std::bitset<256> first;            // the bytes a value of this node can start with
  std::string where;                 // Union: what to name when its parts start alike
};

// The nodes of a grammar; `root` is the document. Immutable once built, shared by every
// request's recognizer.
class Grammar {
 public:
  Grammar();  // the nodes below, for free JSON
  static constexpr int32_t kAny = 0;
  static constexpr int32_t kAnyString = 1;
  static constexpr int32_t kAnyObject = 2;
  static constexpr int32_t kAnyArray = 3;
  static constexpr int32_t kAnyNumber = 4;
  static constexpr int32_t kJsonLiterals = 5;  // true, false, null
  static constexpr int32_t kKeyString = 6;     // a string without escapes

  int32_t add(GrammarNode node);
  GrammarNode& node(int32_t i) { return nodes_[static_cast<size_t>(i)]; }
  const GrammarNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t add_trie(Trie trie);
  const Trie& trie(int32_t i) const { return tries_[static_cast<size_t>(i)]; }
  // A Literal node for exactly these bytes.
  int32_t literal(std::string_view bytes, int32_t then = -1);
  // A Literal node for these alternatives (prefix-free when any has a continuation).
  int32_t literals(const std::vector<std::string>& alternatives, const std::vector<int32_t>& then = {});
  // Fills every node's `first` set (after the graph is complete) and checks that each Union's
  // parts start with different bytes. Throws Error naming the clash otherwise.
  void finish(int32_t root);

  int32_t root() const { return root_; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }

 private:
  std::vector<GrammarNode> nodes_;
  std::vector<Trie> tries_;
  int32_t root_ = kAny;
};

// A byte-at-a-time recognizer of the grammar's documents.
class Recognizer {
 public:
  explicit Recognizer(const Grammar& grammar);
  // Copies only the frames in use (the token mask copies states at every trie step).
  Recognizer(const Recognizer& other) { *this = other; }
  Recognizer& operator=(const Recognizer& other);

  // Takes one byte; false when no document has the bytes so far followed by it (the state is
  // then unspecified: feed a copy when trying).
  bool feed(uint8_t byte);
  bool feed(std::string_view bytes);
  // The bytes so far are a whole document.
  bool complete() const;
  // A whole document to which nothing can be added: generation must end here.
  bool finished() const;

 private:
  struct Frame {
    uint8_t kind = 0;
    uint8_t state = 0;
    uint8_t ws = 0;       // consecutive whitespace bytes
    uint8_t pending = 0;  // string: continuation bytes or hex digits due
    int32_t node = 0;
    int64_t pos = 0;      // trie node, part index, item count, characters, digits, property
    uint64_t seen = 0;    // object: properties present
  };
  static constexpr int kEnd = 256;  // feeding "the document ends here"

  bool step(int byte);
  bool push(uint8_t kind, int32_t node, uint8_t state = 0);
  bool begin_value(int32_t node);
  bool child_done();
  bool object_byte(Frame& f, const GrammarNode& n, int byte);
  bool array_byte(Frame& f, const GrammarNode& n, int byte);
  bool string_byte(Frame& f, const GrammarNode& n, int byte);
  bool number_byte(Frame& f, const GrammarNode& n, int byte);
  bool literal_byte(Frame& f, const GrammarNode& n, int byte);
  bool start_key(Frame& f, const GrammarNode& n);

  const Grammar* grammar_;
  int32_t depth_ = 0;
  std::array<Frame, kMaxDepth> frames_;
};

}  // namespace orchard::serve::structured
