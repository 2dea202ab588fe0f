// JSON Schema -> Grammar, for structured output (OpenAI's response_format json_schema, strict
// mode's subset and a little more).
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties / required / additionalProperties (false: only the declared properties; true,
// absent or a schema: extra properties may follow the declared ones), items, minItems /
// maxItems (up to kMaxUnrolledCount), minLength / maxLength (up to kMaxUnrolledCount
// characters), enum, const, anyOf, $ref into the same document (#, #/$defs/..,
// #/definitions/.., any JSON pointer; recursion allowed), and the annotations title,
// description, $schema, $id, $comment, default, examples, deprecated, readOnly, writeOnly.
// Anything else (pattern, format, minimum, oneOf, allOf, prefixItems, ...) is InvalidArgument
// naming the keyword and where it is, so a request is refused rather than half-honoured.
//
// What the grammar emits: declared properties in declared order (as OpenAI's strict mode emits
// them; required ones always, optional ones may be left out), compact JSON with at most one
// whitespace character (space or newline) after '{', '[', ',' and ':' and before '}' and ']',
// numbers of at most 16 integer digits, 16 fraction digits and 2 exponent digits (finite doubles),
// so a model cannot loop on whitespace or digits. Extra properties (when allowed) follow the
// declared ones, never repeat a declared name and are written without escapes (extra_key_rule.h);
// two extra properties may still share a name. \u escapes must be characters (a surrogate pair,
// never a lone surrogate), counted as one for minLength / maxLength.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"

namespace dq::grammar {

inline constexpr int kMaxUnrolledCount = 64;

// The schema is JSON text; object keys keep the order they are written in.
absl::StatusOr<Grammar> CompileJsonSchema(std::string_view schema_json);

// response_format {"type": "json_object"}: any JSON object.
inline constexpr std::string_view kAnyJsonObjectSchema = R"({"type":"object"})";

}  // namespace dq::grammar
