// The key of an extra object member (additionalProperties) as a grammar rule: any JSON string
// without escapes that is not one of the declared property names. Without the exclusion a
// declared optional property left out could come back as an "extra" with a value its schema
// forbids (or repeat a required one). Escapes are left out so the written bytes are the key
// itself, which makes the exclusion exact ("n\u00e9" cannot spell "né" past it).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/grammar/grammar.h"

namespace dq::grammar {

// Adds the rule (named `name`) and returns its id: '"', the key's characters, '"'. Names that
// need escaping in JSON cannot be written without escapes, so they need no exclusion.
int32_t AddExtraKeyRule(GrammarBuilder& b, std::string name, std::span<const std::string> declared);

}  // namespace dq::grammar
