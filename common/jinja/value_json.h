// Converting JSON (a request's messages and tools) into template values.
#pragma once

#include "common/jinja/value.h"
#include "nlohmann/json.hpp"

namespace dq::jinja {

// Objects keep their key order; integers stay ints and other numbers floats, as Python's json
// does. With `user_strings`, every string is marked as user content.
Value FromJson(const nlohmann::ordered_json& j, bool user_strings = false);

}  // namespace dq::jinja
