#pragma once
// JSON schemas (the subset structured outputs use) compiled into grammar nodes. The grammar
// generates a subset of what the schema accepts, never more: where a schema leaves a choice
// open, generation takes the narrower side (an object with `properties` gets only those
// properties, even without "additionalProperties": false; integers and numbers are written
// without leading zeros and with bounded digits).
//
// Supported: type (one or a list), properties, required, additionalProperties (false, true or a
// schema for objects without properties), items, minItems, maxItems, minLength, maxLength, enum,
// const, anyOf and oneOf (alternatives of different JSON types, or enums starting differently),
// $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion included), and the
// annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly). Every other keyword is refused, naming it and where it is.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "serve/structured/grammar.h"

namespace orchard::serve::structured {

// A schema the compiler cannot honour; `where` is a JSON pointer into the schema ("" = root).
class SchemaError : public Error {
 public:
  SchemaError(std::string message, std::string where);
  const std::string& reason() const { return reason_; }
  const std::string& where() const { return where_; }

 private:
  std::string reason_, where_;
};

// Adds nodes for `schema` to the grammar and returns the node of a document it describes.
// Throws SchemaError.
int32_t compile_schema(Grammar& grammar, const nlohmann::json& schema);

}  // namespace orchard::serve::structured
