#include "serve/structured/json_schema.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace orchard::serve::structured {
namespace {

using nlohmann::json;
using Kind = GrammarNode::Kind;

constexpr int kMaxSchemaDepth = 32;

const std::set<std::string, std::less<>> kAnnotations = {"title",    "description", "default",    "examples", "$schema",
                                                         "$id",      "$comment",    "deprecated", "readOnly", "writeOnly",
                                                         "$defs",    "definitions"};
const std::set<std::string, std::less<>> kKeywords = {"type",     "properties", "required",  "additionalProperties",
                                                      "items",    "minItems",   "maxItems",  "minLength",
                                                      "maxLength", "enum",      "const",     "anyOf",
                                                      "oneOf",    "$ref"};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

std::string escape_pointer(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

bool of_type(const json& value, std::string_view type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") return value.is_number_integer() || (value.is_number_float() && value.get<double>() == static_cast<double>(static_cast<int64_t>(value.get<double>())));
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  return false;
}

class Compiler {
 public:
  Compiler(Grammar& grammar, const json& root) : g_(grammar), root_(root) {}

  int32_t compile(const json& s, const std::string& where, int depth) {
    if (depth > kMaxSchemaDepth) throw SchemaError(fmt::format("the schema nests deeper than {} levels", kMaxSchemaDepth), where);
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw SchemaError("the schema false accepts nothing", where);
      return Grammar::kAny;
    }
    if (!s.is_object()) throw SchemaError(fmt::format("a schema must be an object or a boolean, not {}", s.type_name()), where);
    size_t constraints = 0;
    for (const auto& [key, value] : s.items()) {
      if (kAnnotations.contains(key)) continue;
      if (!kKeywords.contains(key))
        throw SchemaError(fmt::format("the keyword '{}' is not supported (supported: type, properties, required, additionalProperties, "
                                      "items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf, $ref)",
                                      key),
                          where + "/" + escape_pointer(key));
      ++constraints;
    }
    if (auto ref = s.find("$ref"); ref != s.end()) {
      if (constraints > 1) throw SchemaError("'$ref' beside other keywords is not supported", where);
      return reference(*ref, where + "/$ref", depth);
    }
    for (const char* alt : {"anyOf", "oneOf"}) {
      auto it = s.find(alt);
      if (it == s.end()) continue;
      if (constraints > 1) throw SchemaError(fmt::format("'{}' beside other keywords is not supported", alt), where);
      return alternatives(*it, where + "/" + alt, depth);
    }
    if (s.contains("enum") || s.contains("const")) return enumeration(s, where);

    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const json& one : *t) {
          if (!one.is_string()) throw SchemaError("'type' lists strings", where + "/type");
          types.push_back(one.get<std::string>());
        }
      } else {
        throw SchemaError("'type' must be a string or a non-empty array of strings", where + "/type");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties")) {
      types = {"object"};  // a subset of what the schema allows: its objects
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types = {"string"};
    } else {
      return Grammar::kAny;
    }
    if (types.size() == 1) return typed(s, types[0], where, depth);
    GrammarNode u;
    u.kind = Kind::Union;
    u.where = "'type' at " + (where.empty() ? std::string("the root") : where);
    for (const std::string& t : types) u.parts.push_back(typed(s, t, where, depth));
    return g_.add(std::move(u));
  }

 private:
  int32_t typed(const json& s, const std::string& type, const std::string& where, int depth) {
    if (type == "object") return object(s, where, depth);
    if (type == "array") return array(s, where, depth);
    if (type == "string") {
      GrammarNode n;
      n.kind = Kind::String;
      n.min_length = count(s, "minLength", where, 0);
      n.max_length = count(s, "maxLength", where, INT64_MAX);
      if (n.min_length > n.max_length) throw SchemaError("'minLength' exceeds 'maxLength'", where);
      return g_.add(std::move(n));
    }
    if (type == "number" || type == "integer") {
      GrammarNode n;
      n.kind = type == "number" ? Kind::Number : Kind::Integer;
      return g_.add(std::move(n));
    }
    if (type == "boolean") return g_.literals({"true", "false"});
    if (type == "null") return g_.literal("null");
    throw SchemaError(fmt::format("unknown type '{}' (object, array, string, number, integer, boolean or null)", type), where + "/type");
  }

  static int64_t count(const json& s, const char* key, const std::string& where, int64_t absent) {
    auto it = s.find(key);
    if (it == s.end()) return absent;
    if (!it->is_number_unsigned()) throw SchemaError(fmt::format("'{}' must be a non-negative integer", key), where + "/" + key);
    const uint64_t v = it->get<uint64_t>();
    return v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
  }

  int32_t object(const json& s, const std::string& where, int depth) {
    GrammarNode n;
    n.kind = Kind::Object;
    const json* properties = nullptr;
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) throw SchemaError("'properties' must be an object", where + "/properties");
      if (p->size() > static_cast<size_t>(kMaxProperties))
        throw SchemaError(fmt::format("at most {} properties per object are supported, not {}", kMaxProperties, p->size()),
                          where + "/properties");
      properties = &*p;
    }
    std::map<std::string, int32_t> index;
    if (properties != nullptr && !properties->empty()) {
      Trie names;
      for (const auto& [name, sub] : properties->items()) {
        // The name as JSON text, without the opening quote the object frame has seen already.
        index[name] = names.add(dump(json(name)).substr(1));
        n.properties.push_back(compile(sub, where + "/properties/" + escape_pointer(name), depth + 1));
      }
      n.names = g_.add_trie(std::move(names));
    }
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) throw SchemaError("'required' must be an array of names", where + "/required");
      for (size_t i = 0; i < r->size(); ++i) {
        const json& name = (*r)[i];
        const std::string at = fmt::format("{}/required/{}", where, i);
        if (!name.is_string()) throw SchemaError("'required' lists strings", at);
        auto it = index.find(name.get<std::string>());
        if (it == index.end())
          throw SchemaError(fmt::format("the required property '{}' is not in 'properties'", name.get<std::string>()), at);
        n.required |= uint64_t{1} << it->second;
      }
    }
    auto extra = s.find("additionalProperties");
    if (extra != s.end() && !extra->is_boolean() && !extra->is_object())
      throw SchemaError("'additionalProperties' must be a boolean or a schema", where + "/additionalProperties");
    // Objects with properties get only those (a subset of what the schema allows); objects
    // without are dictionaries of what additionalProperties says.
    if (n.properties.empty() && !(extra != s.end() && extra->is_boolean() && !extra->get<bool>()))
      n.additional = extra == s.end() ? Grammar::kAny : compile(*extra, where + "/additionalProperties", depth + 1);
    return g_.add(std::move(n));
  }

  int32_t array(const json& s, const std::string& where, int depth) {
    GrammarNode n;
    n.kind = Kind::Array;
    n.items = s.contains("items") ? compile(s.at("items"), where + "/items", depth + 1) : Grammar::kAny;
    n.min_items = count(s, "minItems", where, 0);
    n.max_items = count(s, "maxItems", where, INT64_MAX);
    if (n.min_items > n.max_items) throw SchemaError("'minItems' exceeds 'maxItems'", where);
    return g_.add(std::move(n));
  }

  int32_t enumeration(const json& s, const std::string& where) {
    std::vector<json> values;
    if (auto c = s.find("const"); c != s.end()) values.push_back(*c);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) throw SchemaError("'enum' must be a non-empty array", where + "/enum");
      if (s.contains("const")) throw SchemaError("'enum' beside 'const' is not supported", where);
      values.assign(e->begin(), e->end());
    }
    for (const auto& [key, value] : s.items())
      if (!kAnnotations.contains(key) && key != "enum" && key != "const" && key != "type")
        throw SchemaError(fmt::format("'{}' beside 'enum' or 'const' is not supported", key), where + "/" + escape_pointer(key));
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) types.push_back(t->get<std::string>());
      else if (t->is_array())
        for (const json& one : *t)
          if (one.is_string()) types.push_back(one.get<std::string>());
    }
    std::vector<std::string> texts;
    std::set<std::string> unique;
    for (const json& v : values) {
      const bool typed_ok = types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return of_type(v, t); });
      if (!typed_ok) continue;
      std::string text = dump(v);
      if (unique.insert(text).second) texts.push_back(std::move(text));
    }
    if (texts.empty()) throw SchemaError("no value of 'enum' or 'const' has the schema's type", where);
    return g_.literals(texts);
  }

  int32_t alternatives(const json& list, const std::string& where, int depth) {
    if (!list.is_array() || list.empty()) throw SchemaError("must be a non-empty array of schemas", where);
    if (list.size() == 1) return compile(list[0], where + "/0", depth + 1);
    GrammarNode u;
    u.kind = Kind::Union;
    u.where = where;
    for (size_t i = 0; i < list.size(); ++i) u.parts.push_back(compile(list[i], fmt::format("{}/{}", where, i), depth + 1));
    return g_.add(std::move(u));
  }

  int32_t reference(const json& ref, const std::string& where, int depth) {
    if (!ref.is_string()) throw SchemaError("'$ref' must be a string", where);
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const json* resolved = nullptr;
    if (target == "#") {
      resolved = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        if (!target.starts_with(prefix)) continue;
        const std::string_view section(prefix + 2, std::string_view(prefix).size() - 3);
        const std::string name = target.substr(std::string_view(prefix).size());
        auto defs = root_.find(std::string(section));
        if (defs != root_.end() && defs->is_object() && defs->contains(name)) resolved = &defs->at(name);
      }
    }
    if (resolved == nullptr)
      throw SchemaError(fmt::format("'$ref' '{}' does not name '#', '#/$defs/NAME' or '#/definitions/NAME' of this schema", target), where);
    // A placeholder first, so that a recursive reference finds it; it takes the compiled
    // node's content once that exists.
    const int32_t placeholder = g_.add(GrammarNode{});
    refs_[target] = placeholder;
    const int32_t compiled = compile(*resolved, target.substr(1), depth + 1);
    g_.node(placeholder) = g_.node(compiled);
    return placeholder;
  }

  Grammar& g_;
  const json& root_;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

SchemaError::SchemaError(std::string message, std::string where)
    : Error(error_message("structured", "schema{}: {}", where.empty() ? "" : " at " + where, message)),
      reason_(std::move(message)),
      where_(std::move(where)) {}

int32_t compile_schema(Grammar& grammar, const nlohmann::json& schema) {
  Compiler compiler(grammar, schema);
  return compiler.compile(schema, "", 0);
}

}  // namespace orchard::serve::structured
