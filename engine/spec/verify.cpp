#include "engine/spec/verify.h"

#include <algorithm>
#include <vector>

namespace dq {

int VerifyDraft(std::span<const int32_t> fed, const float* rows, int vocab, Sampler& sampler,
                const VerifiedTokenFn& emit) {
  const int n = static_cast<int>(fed.size());
  std::vector<float> row(vocab);
  int accepted = 0;
  for (int j = 0; j < n; ++j) {
    std::copy_n(rows + int64_t{j} * vocab, vocab, row.begin());
    const int32_t token = sampler.Sample(row);
    if (!emit(j, token) || j + 1 == n || token != fed[j + 1]) break;
    ++accepted;
  }
  return accepted;
}

int DraftBudget(int k, int max_tokens, int generated, int num_tokens, int token_limit) {
  const int room_tokens = max_tokens - generated - 1;
  const int room_positions = token_limit - 1 - num_tokens;
  return std::max(0, std::min({k, room_tokens, room_positions}));
}

}  // namespace dq
