// What the drafter tests share: requests with ignore_eos (so every answer runs to max_tokens and
// each step has a draft to verify) and one Generator run with a drafter (or none).
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/generate/generator.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"

namespace dq::spec_test {

inline GenerationRequest Request(const Model& m, const std::string& text, int max_tokens,
                                 float temperature = 0,
                                 std::optional<uint64_t> seed = std::nullopt) {
  GenerationRequest r;
  r.prompt = m.tokenizer.Encode(text);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  r.params.seed = seed;
  r.params.ignore_eos = true;
  return r;
}

// `reqs` through a Generator over `runner` with `drafter` (none: plain decoding), k at most.
inline absl::StatusOr<std::vector<GenerationResult>> TryRun(
    ModelRunner& runner, const Model& m, const std::vector<GenerationRequest>& reqs,
    Drafter* drafter, int k = 4) {
  GeneratorOptions go;
  go.drafter = drafter;
  go.spec.k = k;
  Generator g(runner, m.tokenizer, m.config.eos_token_ids, go);
  return g.Generate(reqs);
}

inline std::vector<GenerationResult> Run(ModelRunner& runner, const Model& m,
                                         const std::vector<GenerationRequest>& reqs,
                                         Drafter* drafter = nullptr, int k = 4) {
  auto r = TryRun(runner, m, reqs, drafter, k);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<GenerationResult>{};
}

}  // namespace dq::spec_test
