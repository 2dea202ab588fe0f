// The differential corpus: every case in tests/golden/jinja/jinja_golden.json was rendered by
// Python's jinja2 in transformers' chat template environment (make_jinja_golden.py); dq's
// interpreter must produce the same bytes, or fail where jinja2 raised.
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "common/jinja/template.h"
#include "common/jinja/value_json.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dq::jinja {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The instant make_jinja_golden.py fixes strftime_now to: 2025-03-14 09:26:53.
std::string FixedStrftime(std::string_view format) {
  std::tm tm{};
  tm.tm_year = 2025 - 1900, tm.tm_mon = 2, tm.tm_mday = 14;
  tm.tm_hour = 9, tm.tm_min = 26, tm.tm_sec = 53;
  std::mktime(&tm);  // fills in the weekday and day of year
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &tm);
  return std::string(buf, n);
}

TEST(JinjaGolden, MatchesPythonJinja2) {
  const std::string dir = std::string(DQ_SOURCE_DIR) + "/tests/golden/jinja/";
  // DQ_JINJA_GOLDEN points at another corpus written by the script (e.g. with more cases).
  const char* alt = std::getenv("DQ_JINJA_GOLDEN");
  const std::string text = ReadFile(alt ? std::string(alt) : dir + "jinja_golden.json");
  ASSERT_FALSE(text.empty()) << "missing corpus " << dir << "jinja_golden.json";
  const nlohmann::ordered_json golden = nlohmann::ordered_json::parse(text);
  const auto& contexts = golden.at("contexts");
  RenderOptions opts;
  opts.strftime_now = FixedStrftime;

  std::map<std::string, absl::StatusOr<JinjaTemplate>> parsed;
  int judged = 0, passed = 0, reported = 0;
  std::map<std::string, std::pair<int, int>> per_template;  // passed, judged
  for (const auto& c : golden.at("cases")) {
    const std::string name = c.at("name");
    const bool is_file = c.contains("template_file");
    const std::string key = is_file ? "file:" + c.at("template_file").get<std::string>()
                                    : "src:" + c.at("source").get<std::string>();
    auto it = parsed.find(key);
    if (it == parsed.end()) {
      const std::string src =
          is_file ? ReadFile(dir + "templates/" + c.at("template_file").get<std::string>())
                  : c.at("source").get<std::string>();
      it = parsed.emplace(key, JinjaTemplate::Parse(src)).first;
    }
    const Value ctx = FromJson(contexts.at(c.at("context").get<std::string>()));
    absl::StatusOr<std::string> got =
        it->second.ok() ? it->second->Render(ctx, opts) : it->second.status();
    const bool want_error = c.at("error").get<bool>();
    bool ok;
    if (want_error) {
      ok = !got.ok();
    } else {
      ok = got.ok() && *got == c.at("expected").get<std::string>();
    }
    ++judged;
    passed += ok;
    const std::string group =
        is_file ? c.at("template_file").get<std::string>() : name.substr(0, name.find('/'));
    per_template[group].first += ok;
    per_template[group].second += 1;
    if (!ok && reported++ < 25) {
      ADD_FAILURE() << name << "\n  source: " << (is_file ? key : c.at("source").dump())
                    << "\n  want: "
                    << (want_error ? "error (" + c.value("python_error", "") + ")"
                                   : nlohmann::json(c.at("expected")).dump())
                    << "\n  got:  "
                    << (got.ok() ? nlohmann::json(*got).dump() : got.status().ToString());
    }
  }
  for (const auto& [group, counts] : per_template) {
    std::printf("  %-60s %d/%d\n", group.c_str(), counts.first, counts.second);
  }
  std::printf("jinja golden: %d/%d cases identical\n", passed, judged);
  EXPECT_GT(judged, 0) << "the corpus judged no cases";
  EXPECT_EQ(passed, judged);
}

}  // namespace
}  // namespace dq::jinja
