// dq-bench-grammar: the CPU cost of structured output's token masks on a real vocabulary, as
// JSON. Per schema: compiling it, precomputing its masks (CompiledGrammar::Build), and per
// decode step GrammarMatcher::FillNextTokenMask and the whole Sampler::Sample with the grammar,
// beside Sample without it (the step's sampling cost the mask adds to). Steps walk documents
// sampled at temperature 1 from random logits (the grammar alone decides their shape).
//   dq-bench-grammar --tokenizer tokenizer.json [--docs 20] [--max-steps 256]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_matcher.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/token_vocabulary.h"
#include "engine/sampler/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct NamedSchema {
  const char* name;
  const char* schema;
};

// A spread of shapes: free-form (json_object), a flat strict record, nested arrays of enums and
// objects, and a recursive $ref.
const NamedSchema kSchemas[] = {
    {"json_object", R"({"type":"object"})"},
    {"person",
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "email":{"type":"string"},"admin":{"type":"boolean"}},"required":["name","age","email",
        "admin"],"additionalProperties":false})"},
    {"orders",
     R"({"type":"object","properties":{"orders":{"type":"array","maxItems":4,"items":{
        "type":"object","properties":{"id":{"type":"integer"},"status":{"enum":["new","paid",
        "shipped","cancelled"]},"total":{"type":"number"},"tags":{"type":"array","items":{
        "type":"string","maxLength":12},"maxItems":3}},"required":["id","status","total"],
        "additionalProperties":false}}},"required":["orders"],"additionalProperties":false})"},
    {"tree",
     R"({"$defs":{"node":{"type":"object","properties":{"label":{"type":"string",
        "maxLength":8},"children":{"type":"array","maxItems":2,"items":{"$ref":"#/$defs/node"}}},
        "required":["label","children"],"additionalProperties":false}},"$ref":"#/$defs/node"})"},
};

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

json Summary(std::vector<double> us) {
  if (us.empty()) return json::object();
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
  };
  return {{"n", us.size()},    {"mean_us", sum / us.size()}, {"p50_us", at(0.5)},
          {"p90_us", at(0.9)}, {"p99_us", at(0.99)},         {"max_us", us.back()}};
}

std::vector<float> Logits(std::mt19937_64& rng, int32_t n) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& x : l) x = d(rng);
  return l;
}

struct Options {
  std::string tokenizer, machine, commit;
  int docs = 20;
  int max_steps = 256;
  int32_t eos = -1;
};

json BenchSchema(const NamedSchema& s, const dq::Tokenizer& tok,
                 const std::shared_ptr<const dq::grammar::TokenVocabulary>& vocab,
                 const Options& o) {
  const auto t0 = Clock::now();
  auto g = dq::grammar::CompileJsonSchema(s.schema);
  const auto t1 = Clock::now();
  if (!g.ok()) return {{"schema", s.name}, {"error", std::string(g.status().message())}};
  const int32_t grammar_states = g->num_states();
  const auto compiled = dq::grammar::CompiledGrammar::Build(std::move(*g), vocab);
  const auto t2 = Clock::now();
  std::mt19937_64 rng(12345);
  std::vector<double> mask_us, sample_us, plain_us;
  std::vector<uint32_t> words(static_cast<size_t>(compiled->mask_words()));
  int finished = 0;
  for (int d = 0; d < o.docs; ++d) {
    dq::SamplingParams p;
    p.seed = rng();
    p.max_tokens = o.max_steps;
    p.eos_token_ids = {o.eos};
    p.grammar = compiled;
    dq::Sampler constrained(p);
    p.grammar = nullptr;
    dq::Sampler plain(p);
    dq::grammar::GrammarMatcher probe(compiled);
    for (int step = 0; step < o.max_steps; ++step) {
      const std::vector<float> logits = Logits(rng, vocab->vocab_size());
      auto a = Clock::now();
      probe.FillNextTokenMask(words);
      auto b = Clock::now();
      mask_us.push_back(Ms(a, b) * 1e3);
      std::vector<float> row = logits;
      a = Clock::now();
      const int32_t t = constrained.Sample(row);
      b = Clock::now();
      sample_us.push_back(Ms(a, b) * 1e3);
      row = logits;
      a = Clock::now();
      (void)plain.Sample(row);
      b = Clock::now();
      plain_us.push_back(Ms(a, b) * 1e3);
      if (t == o.eos) {
        ++finished;
        break;
      }
      constrained.Accept(t);
      probe.AcceptToken(t);
    }
  }
  const auto& st = compiled->stats();
  return {{"schema", s.name},
          {"compile_ms", Ms(t0, t1)},
          {"precompute_ms", Ms(t1, t2)},
          {"grammar_states", grammar_states},
          {"mask_states", st.states},
          {"accepted_per_state", st.states ? st.accepted / st.states : 0},
          {"dependent_per_state", st.states ? st.dependent / st.states : 0},
          {"docs", o.docs},
          {"docs_finished", finished},
          {"fill_mask", Summary(mask_us)},
          {"sample_with_grammar", Summary(sample_us)},
          {"sample_without_grammar", Summary(plain_us)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dq-bench-grammar: structured output mask cost on the CPU"};
  Options o;
  app.add_option("--tokenizer", o.tokenizer, "HF tokenizer.json")->required();
  app.add_option("--docs", o.docs, "documents sampled per schema");
  app.add_option("--max-steps", o.max_steps, "most tokens per document");
  app.add_option("--eos", o.eos, "EOS token id (default: the tokenizer's eos, else 0)");
  app.add_option("--machine", o.machine, "machine description for the JSON");
  app.add_option("--commit", o.commit, "commit for the JSON");
  CLI11_PARSE(app, argc, argv);
  auto tok = dq::Tokenizer::FromHfJson(o.tokenizer);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  if (o.eos < 0) o.eos = tok->eos_id().value_or(0);
  const auto vocab = dq::grammar::TokenVocabulary::FromTokenizer(*tok, tok->vocab_size(), {o.eos});
  json results = json::array();
  for (const NamedSchema& s : kSchemas) results.push_back(BenchSchema(s, *tok, vocab, o));
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  json out = {{"benchmark", "structured output token masks, CPU"},
              {"machine", o.machine},
              {"commit", o.commit},
              {"command", command},
              {"tokenizer", o.tokenizer},
              {"vocab_size", vocab->vocab_size()},
              {"eos", o.eos},
              {"results", results}};
  std::cout << out.dump(2) << "\n";
  return 0;
}
