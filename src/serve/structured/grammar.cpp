#include "serve/structured/grammar.h"

#include <algorithm>

#include "core/error.h"

namespace orchard::serve::structured {
namespace {

using Kind = GrammarNode::Kind;

enum FrameKind : uint8_t { kRoot, kValue, kObject, kArray, kString, kNumber, kLiteral, kSequence };

// What a frame did with a byte: refused it, took it, or handed the stack a new top that must
// see the same byte.
enum class Took { No, Yes, Again };

bool is_ws(int b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool is_digit(int b) { return b >= '0' && b <= '9'; }
bool is_hex(int b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

std::bitset<256> bytes_of(std::string_view s) {
  std::bitset<256> set;
  for (char c : s) set.set(static_cast<uint8_t>(c));
  return set;
}

}  // namespace

int32_t Trie::add(std::string_view bytes) {
  ORCHARD_CHECK(!bytes.empty(), "a trie entry is empty");
  const int32_t entry = entries++;
  int32_t at = 0;
  auto mark = [&](int32_t n) {
    if (entry < 64) nodes[static_cast<size_t>(n)].below |= uint64_t{1} << entry;
  };
  mark(at);
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    int32_t next = child(at, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      auto& children = nodes[static_cast<size_t>(at)].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::pair<uint8_t, int32_t>(b, -1)), {b, next});
    }
    at = next;
    mark(at);
  }
  ORCHARD_CHECK(nodes[static_cast<size_t>(at)].entry < 0, "the trie holds '{}' twice", bytes);
  nodes[static_cast<size_t>(at)].entry = entry;
  return entry;
}

int32_t Trie::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : nodes[static_cast<size_t>(node)].children) {
    if (b == byte) return next;
    if (b > byte) break;
  }
  return -1;
}

Grammar::Grammar() {
  GrammarNode any;
  add(any);
  GrammarNode string;
  string.kind = Kind::String;
  add(string);
  GrammarNode object;
  object.kind = Kind::Object;
  object.additional = kAny;
  add(object);
  GrammarNode array;
  array.kind = Kind::Array;
  array.items = kAny;
  add(array);
  GrammarNode number;
  number.kind = Kind::Number;
  add(number);
  literals({"true", "false", "null"});
  GrammarNode key;
  key.kind = Kind::String;
  key.escapes = false;
  add(key);
  ORCHARD_CHECK(size() == kKeyString + 1, "the fixed nodes are numbered as declared");
}

int32_t Grammar::add(GrammarNode node) {
  nodes_.push_back(std::move(node));
  return size() - 1;
}

int32_t Grammar::add_trie(Trie trie) {
  tries_.push_back(std::move(trie));
  return static_cast<int32_t>(tries_.size()) - 1;
}

int32_t Grammar::literal(std::string_view bytes, int32_t then) { return literals({std::string(bytes)}, {then}); }

int32_t Grammar::literals(const std::vector<std::string>& alternatives, const std::vector<int32_t>& then) {
  Trie trie;
  for (const std::string& a : alternatives) trie.add(a);
  GrammarNode n;
  n.kind = Kind::Literal;
  n.trie = add_trie(std::move(trie));
  n.then = then;
  n.then.resize(alternatives.size(), -1);
  return add(std::move(n));
}

void Grammar::finish(int32_t root) {
  root_ = root;
  const std::bitset<256> number = bytes_of("-0123456789");
  // Unions and sequences take their parts' sets, which may lie ahead in the graph (or, through
  // $ref, around a cycle): repeat until nothing grows.
  for (bool grew = true; grew;) {
    grew = false;
    for (GrammarNode& n : nodes_) {
      std::bitset<256> first;
      switch (n.kind) {
        case Kind::Any: first = bytes_of("{[\"tfn") | number; break;
        case Kind::Object: first = bytes_of("{"); break;
        case Kind::Array: first = bytes_of("["); break;
        case Kind::String: first = bytes_of("\""); break;
        case Kind::Number:
        case Kind::Integer: first = number; break;
        case Kind::Literal:
          for (const auto& [b, next] : trie(n.trie).nodes[0].children) first.set(b);
          break;
        case Kind::Union:
          for (int32_t p : n.parts) first |= node(p).first;
          break;
        case Kind::Sequence:
          if (!n.parts.empty()) first = node(n.parts[0]).first;
          break;
      }
      if ((first | n.first) != n.first) {
        n.first |= first;
        grew = true;
      }
    }
  }
  for (const GrammarNode& n : nodes_) {
    if (n.kind != Kind::Union) continue;
    for (size_t i = 0; i < n.parts.size(); ++i) {
      for (size_t j = i + 1; j < n.parts.size(); ++j) {
        const std::bitset<256> both = node(n.parts[i]).first & node(n.parts[j]).first;
        if (both.none()) continue;
        size_t b = 0;
        while (!both.test(b)) ++b;
        throw Error(error_message("structured",
                                  "{}: alternatives {} and {} can both start with '{}'; only alternatives of different JSON types "
                                  "(or enum values that start differently) are supported",
                                  n.where.empty() ? "a union" : n.where, i, j, static_cast<char>(b)));
      }
    }
  }
}

Recognizer::Recognizer(const Grammar& grammar) : grammar_(&grammar) {
  frames_[0] = Frame{kRoot, 0, 0, 0, grammar.root(), 0, 0};
  frames_[1] = Frame{kValue, 0, 0, 0, grammar.root(), 0, 0};
  depth_ = 2;
}

Recognizer& Recognizer::operator=(const Recognizer& other) {
  grammar_ = other.grammar_;
  depth_ = other.depth_;
  std::copy_n(other.frames_.begin(), depth_, frames_.begin());
  return *this;
}

bool Recognizer::feed(uint8_t byte) { return step(byte); }

bool Recognizer::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!step(static_cast<uint8_t>(c))) return false;
  return true;
}

bool Recognizer::complete() const {
  Recognizer copy(*this);
  return copy.step(kEnd);
}

bool Recognizer::finished() const { return depth_ == 1 && frames_[0].state == 1; }

bool Recognizer::push(uint8_t kind, int32_t node, uint8_t state) {
  if (depth_ == kMaxDepth) return false;
  frames_[static_cast<size_t>(depth_++)] = Frame{kind, state, 0, 0, node, 0, 0};
  return true;
}

// Turns the Value frame on top into the frame of the node's kind that a value starting with
// the byte about to be fed must be.
bool Recognizer::begin_value(int32_t node_index) {
  Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  const GrammarNode& n = grammar_->node(node_index);
  f = Frame{kValue, 0, 0, 0, node_index, 0, 0};
  switch (n.kind) {
    case Kind::Any: return true;  // resolved by the byte in step()
    case Kind::Object: f.kind = kObject; return true;
    case Kind::Array: f.kind = kArray; return true;
    case Kind::String: f.kind = kString; return true;
    case Kind::Number:
    case Kind::Integer: f.kind = kNumber; return true;
    case Kind::Literal: f.kind = kLiteral; return true;
    case Kind::Union: return true;  // resolved by the byte in step()
    case Kind::Sequence:
      f.kind = kSequence;
      return push(kValue, n.parts[0]);
  }
  return false;
}

// Pops the finished frame on top and tells its parent.
bool Recognizer::child_done() {
  for (;;) {
    --depth_;
    Frame& p = frames_[static_cast<size_t>(depth_ - 1)];
    p.ws = 0;
    switch (p.kind) {
      case kRoot: p.state = 1; return true;
      case kObject: p.state = p.state == 3 ? 4 : 6; return true;  // a free key, or a value
      case kArray:
        ++p.pos;
        p.state = 3;
        return true;
      case kSequence: {
        const GrammarNode& n = grammar_->node(p.node);
        if (++p.pos < static_cast<int64_t>(n.parts.size())) return push(kValue, n.parts[static_cast<size_t>(p.pos)]);
        continue;  // the sequence is done too
      }
      default: ORCHARD_CHECK(false, "frame kind {} has no children", p.kind);
    }
  }
}

bool Recognizer::step(int byte) {
  for (;;) {
    Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
    const GrammarNode& n = grammar_->node(f.node);
    Took took = Took::No;
    switch (f.kind) {
      case kRoot: took = f.state == 1 && byte == kEnd ? Took::Yes : Took::No; break;
      case kValue:
        if (byte == kEnd) return false;
        // Whitespace before a value, unless the value itself starts with it (fixed text).
        if (is_ws(byte) && !n.first.test(static_cast<size_t>(byte))) return ++f.ws <= kMaxWhitespace;
        if (n.kind == Kind::Any) {
          int32_t target = -1;
          if (byte == '{') target = Grammar::kAnyObject;
          else if (byte == '[') target = Grammar::kAnyArray;
          else if (byte == '"') target = Grammar::kAnyString;
          else if (byte == '-' || is_digit(byte)) target = Grammar::kAnyNumber;
          else if (byte == 't' || byte == 'f' || byte == 'n') target = Grammar::kJsonLiterals;
          if (target < 0 || !begin_value(target)) return false;
        } else if (n.kind == Kind::Union) {
          int32_t target = -1;
          for (int32_t p : n.parts)
            if (grammar_->node(p).first.test(static_cast<size_t>(byte))) target = p;
          if (target < 0 || !begin_value(target)) return false;
        } else if (!begin_value(f.node)) {
          return false;
        }
        took = Took::Again;
        break;
      case kObject: took = object_byte(f, n, byte) ? Took::Yes : Took::No; break;
      case kArray:
        if (f.state == 1 || f.state == 4) {
          // An item starts here unless this is whitespace or the array's end.
          if (!is_ws(byte) && byte != kEnd && !(f.state == 1 && byte == ']')) {
            if (f.pos >= n.max_items) return false;
            f.state = 2;
            if (!push(kValue, n.items)) return false;
            took = Took::Again;
            break;
          }
        }
        took = array_byte(f, n, byte) ? Took::Yes : Took::No;
        break;
      case kString: took = string_byte(f, n, byte) ? Took::Yes : Took::No; break;
      case kNumber:
        if (number_byte(f, n, byte)) {
          took = Took::Yes;
        } else {
          // A number ends at the first byte that cannot extend it, which its parent then takes.
          const bool whole = f.state == 2 || f.state == 3 || f.state == 5 || f.state == 8;
          if (!whole || !child_done()) return false;
          took = Took::Again;
        }
        break;
      case kLiteral: {
        if (!literal_byte(f, n, byte)) return false;
        // literal_byte leaves state 1 when the byte belongs to what follows the literal.
        took = f.state == 1 ? Took::Again : Took::Yes;
        if (f.state == 1) f.state = 0;
        if (took == Took::Again) {
          const Trie& trie = grammar_->trie(n.trie);
          const int32_t entry = trie.nodes[static_cast<size_t>(f.pos)].entry;
          const int32_t then = n.then[static_cast<size_t>(entry)];
          if (then >= 0) {
            f = Frame{kValue, 0, 0, 0, then, 0, 0};
          } else if (!child_done()) {
            return false;
          }
        }
        break;
      }
      default: return false;
    }
    if (took == Took::No) return false;
    if (took == Took::Yes) return true;
  }
}

bool Recognizer::start_key(Frame& f, const GrammarNode& n) {
  if (depth_ == kMaxDepth) return false;  // the value would have no room
  if (n.names >= 0) {
    f.state = 2;
    f.pos = 0;
    return true;
  }
  f.state = 3;
  f.pos = -1;  // the value is an additional property's
  return push(kString, Grammar::kAnyString, 1);
}

bool Recognizer::object_byte(Frame& f, const GrammarNode& n, int byte) {
  if (byte == kEnd) return false;
  const uint64_t all = n.properties.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.properties.size()) - 1;
  const bool more_keys = n.additional >= 0 || (all & ~f.seen) != 0;
  const bool may_close = (n.required & ~f.seen) == 0;
  if (is_ws(byte) && f.state != 0 && f.state != 2) return ++f.ws <= kMaxWhitespace;
  f.ws = 0;
  switch (f.state) {
    case 0:
      if (byte != '{') return false;
      f.state = 1;
      return true;
    case 1:  // after '{'
      if (byte == '}') return may_close && child_done();
      return byte == '"' && more_keys && start_key(f, n);
    case 2: {  // inside a key, following the property names
      const Trie& trie = grammar_->trie(n.names);
      const int32_t c = trie.child(static_cast<int32_t>(f.pos), static_cast<uint8_t>(byte));
      const bool viable = c >= 0 && (n.additional >= 0 || (trie.nodes[static_cast<size_t>(c)].below & ~f.seen) != 0);
      if (viable) {
        const int32_t entry = trie.nodes[static_cast<size_t>(c)].entry;
        if (entry < 0) {
          f.pos = c;
          return true;
        }
        const uint64_t bit = uint64_t{1} << entry;
        if (f.seen & bit) return false;  // a property given twice
        f.seen |= bit;
        f.pos = entry;
        f.state = 4;
        return true;
      }
      if (n.additional < 0) return false;
      // Another property: the key so far differs from every name.
      f.pos = -1;
      if (byte == '"') {
        f.state = 4;
        return true;
      }
      f.state = 3;
      return push(kString, Grammar::kKeyString, 1) && step(byte);
    }
    case 4:  // after a key
      if (byte != ':') return false;
      f.state = 5;
      return push(kValue, f.pos >= 0 ? n.properties[static_cast<size_t>(f.pos)] : n.additional);
    case 6:  // after a value
      if (byte == ',') {
        f.state = 7;
        return more_keys;
      }
      return byte == '}' && may_close && child_done();
    case 7:  // after ','
      return byte == '"' && start_key(f, n);
    default: return false;
  }
}

bool Recognizer::array_byte(Frame& f, const GrammarNode& n, int byte) {
  if (byte == kEnd) return false;
  if (is_ws(byte) && f.state != 0) return ++f.ws <= kMaxWhitespace;
  f.ws = 0;
  switch (f.state) {
    case 0:
      if (byte != '[') return false;
      f.state = 1;
      return true;
    case 1: return byte == ']' && n.min_items == 0 && child_done();
    case 3:
      if (byte == ',') {
        f.state = 4;
        return f.pos < n.max_items;
      }
      return byte == ']' && f.pos >= n.min_items && child_done();
    default: return false;
  }
}

bool Recognizer::string_byte(Frame& f, const GrammarNode& n, int byte) {
  if (byte == kEnd) return false;
  enum : uint8_t { kOpen, kInside, kEscape, kHex, kCont, kContE0, kContED, kContF0, kContF4 };
  const auto one_more = [&] { return ++f.pos <= n.max_length; };
  switch (f.state) {
    case kOpen:
      if (byte != '"') return false;
      f.state = kInside;
      return true;
    case kInside:
      if (byte == '"') return f.pos >= n.min_length && child_done();
      if (byte == '\\') {
        f.state = kEscape;
        return n.escapes && one_more();
      }
      if (byte < 0x20) return false;  // control characters must be escaped
      if (byte < 0x80) return one_more();
      // UTF-8: a lead byte and what its first continuation byte may be (no overlong forms,
      // surrogates or code points past U+10FFFF).
      if (byte >= 0xC2 && byte <= 0xDF) {
        f.state = kCont, f.pending = 1;
      } else if (byte >= 0xE0 && byte <= 0xEF) {
        f.state = byte == 0xE0 ? kContE0 : byte == 0xED ? kContED : kCont, f.pending = 2;
      } else if (byte >= 0xF0 && byte <= 0xF4) {
        f.state = byte == 0xF0 ? kContF0 : byte == 0xF4 ? kContF4 : kCont, f.pending = 3;
      } else {
        return false;
      }
      return one_more();
    case kEscape:
      if (byte == 'u') {
        // Escaped code points would make lengths differ from the validator's count (a
        // surrogate pair is one character), so length-limited strings do without them.
        if (n.min_length > 0 || n.max_length < INT64_MAX) return false;
        f.state = kHex, f.pending = 4;
        return true;
      }
      if (std::string_view("\"\\/bfnrt").find(static_cast<char>(byte)) == std::string_view::npos) return false;
      f.state = kInside;
      return true;
    case kHex:
      if (!is_hex(byte)) return false;
      if (--f.pending == 0) f.state = kInside;
      return true;
    default: {
      const int lo = f.state == kContE0 ? 0xA0 : f.state == kContF0 ? 0x90 : 0x80;
      const int hi = f.state == kContED ? 0x9F : f.state == kContF4 ? 0x8F : 0xBF;
      if (byte < lo || byte > hi) return false;
      f.state = --f.pending == 0 ? kInside : kCont;
      return true;
    }
  }
}

bool Recognizer::number_byte(Frame& f, const GrammarNode& n, int byte) {
  enum : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };
  const bool fractions = n.kind != Kind::Integer;
  const bool digit = is_digit(byte);
  const bool e = fractions && (byte == 'e' || byte == 'E');
  switch (f.state) {
    case kStart:
      if (byte == '-') return f.state = kMinus, true;
      [[fallthrough]];
    case kMinus:
      if (byte == '0') return f.state = kZero, true;
      if (digit) return f.state = kInt, f.pos = 1, true;
      return false;
    case kZero:
    case kInt:
      if (digit && f.state == kInt && f.pos < kMaxIntegerDigits) return ++f.pos, true;
      if (fractions && byte == '.') return f.state = kDot, true;
      if (e) return f.state = kE, true;
      return false;
    case kDot:
      if (digit) return f.state = kFrac, f.pos = 1, true;
      return false;
    case kFrac:
      if (digit && f.pos < kMaxFractionDigits) return ++f.pos, true;
      if (e) return f.state = kE, true;
      return false;
    case kE:
      if (byte == '+' || byte == '-') return f.state = kESign, true;
      [[fallthrough]];
    case kESign:
      if (digit) return f.state = kExp, f.pos = 1, true;
      return false;
    case kExp: return digit && f.pos < kMaxExponentDigits && (++f.pos, true);
    default: return false;
  }
}

// Follows the trie. At an entry with nothing below it the literal ends at once; at an entry
// with longer entries below, a byte none of them continues with ends it (state 1: the byte is
// the next frame's).
bool Recognizer::literal_byte(Frame& f, const GrammarNode& n, int byte) {
  const Trie& trie = grammar_->trie(n.trie);
  const Trie::Node& at = trie.nodes[static_cast<size_t>(f.pos)];
  const int32_t c = byte == kEnd ? -1 : trie.child(static_cast<int32_t>(f.pos), static_cast<uint8_t>(byte));
  if (c < 0) {
    if (at.entry < 0) return false;
    f.state = 1;
    return true;
  }
  f.pos = c;
  const Trie::Node& next = trie.nodes[static_cast<size_t>(c)];
  if (next.entry < 0 || !next.children.empty()) return true;
  const int32_t then = n.then[static_cast<size_t>(next.entry)];
  if (then >= 0) {
    f = Frame{kValue, 0, 0, 0, then, 0, 0};
    return true;
  }
  return child_done();
}

}  // namespace orchard::serve::structured
