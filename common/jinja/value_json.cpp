#include "common/jinja/value_json.h"

namespace dq::jinja {

Value FromJson(const nlohmann::ordered_json& j, bool user_strings) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return user_strings ? Value::UserString(j.get<std::string>())
                          : Value::String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(FromJson(x, user_strings));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> kv;
      for (const auto& [k, x] : j.items()) {
        kv.emplace_back(Value::String(k), FromJson(x, user_strings));
      }
      return Value::Dict(std::move(kv));
    }
    default:
      return Value::None();
  }
}

}  // namespace dq::jinja
