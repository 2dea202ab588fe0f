// Gated DeltaNet's CPU pieces (engine/cpu/gated_delta.h) against HF transformers' Qwen3.5 code,
// from tests/golden/gdn/gdn_hf.json (made by make_gdn_golden.py beside it: torch_chunk_ and
// torch_recurrent_gated_delta_rule, causal_conv1d_fn / _update, Qwen3_5RMSNormGated and one whole
// Qwen3_5GatedDeltaNet layer, all fp32 on the CPU).
//
// Tolerances: both sides are fp32, so they differ by rounding alone. The golden records, per case,
// HF's own fp32 error against a float64 recurrence: at most 2.4e-7 on outputs (|out| <= 0.33) and
// 1e-6 on final states (|state| <= 1.2), the chunked form's being the larger (its triangular
// solve and the exps of cumulative decays over a full chunk). Ours against HF measured at most
// 1.8e-7 (recurrent) and 1.7e-6 (chunked: the final state after a full 64-token chunk); conv
// 1.2e-7, norm 2.3e-7, the whole layer 2.2e-6. We allow |ours - hf| <= 1e-5 * max(1, |hf|),
// ~6x the worst of those; the inputs are fixed, so this does not flake. A real difference is far
// above it: scaling the log decays or the last chunk token's state write by 1.001, or the
// conv's silu argument by 1.0001, fails here at 4e-5 .. 5e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "engine/cpu/gated_delta.h"

namespace dq::cpu {
namespace {

constexpr double kTol = 1e-5;

const nlohmann::json& Golden() {
  static const nlohmann::json g = [] {
    std::ifstream f(std::string(DQ_SOURCE_DIR) + "/tests/golden/gdn/gdn_hf.json");
    return f ? nlohmann::json::parse(f) : nlohmann::json();
  }();
  return g;
}

std::vector<float> F32(const nlohmann::json& b64) {
  std::string bytes;
  EXPECT_TRUE(absl::Base64Unescape(b64.get<std::string>(), &bytes));
  EXPECT_EQ(bytes.size() % 4, 0u);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// The worst |ours - ref| / max(1, |ref|); sizes must agree.
double MaxErr(const std::vector<float>& ours, const std::vector<float>& ref) {
  EXPECT_EQ(ours.size(), ref.size());
  if (ours.size() != ref.size() || ref.empty()) return 1e30;
  double m = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double{ours[i]} - ref[i]) / std::max(1.0, std::fabs(double{ref[i]}));
    m = std::isfinite(d) ? std::max(m, d) : 1e30;
  }
  return m;
}

// Grouped heads: value head h reads q/k head h / (v_heads / k_heads), as HF's repeat_interleave.
std::vector<float> RepeatHeads(const std::vector<float>& x, int64_t tokens, int k_heads,
                               int v_heads, int dim) {
  std::vector<float> out(tokens * v_heads * dim);
  const int rep = v_heads / k_heads;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < v_heads; ++h) {
      std::copy_n(&x[(t * k_heads + h / rep) * dim], dim, &out[(t * v_heads + h) * dim]);
    }
  }
  return out;
}

TEST(GatedDeltaGolden, RecordsItsSource) {
  const nlohmann::json& g = Golden();
  ASSERT_FALSE(g.is_null()) << "missing or unreadable tests/golden/gdn/gdn_hf.json";
  EXPECT_FALSE(g.value("torch", "").empty());
  EXPECT_FALSE(g.value("transformers", "").empty());
  ASSERT_TRUE(g.contains("functions"));
  for (const char* f : {"torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"}) {
    EXPECT_TRUE(g["functions"].contains(f)) << f;
  }
}

// Each case: raw q, k (we L2-normalize them, as the layer does before the rule) through both of
// our forms, from the case's initial state or a zero one, against HF's outputs and final states.
TEST(GatedDeltaGolden, RuleMatchesTransformers) {
  const nlohmann::json& g = Golden();
  ASSERT_TRUE(g.contains("gdn") && g["gdn"].is_array()) << "no gdn cases in the golden";
  int runs = 0;
  double worst_rec = 0, worst_chunk = 0;
  for (const auto& c : g["gdn"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const int64_t t = c["tokens"];
    const int kh = c["k_heads"], vh = c["v_heads"], dk = c["dk"], dv = c["dv"], chunk = c["chunk"];
    const GatedDeltaShape s{vh, dk, dv};
    std::vector<float> q = F32(c["q"]), k = F32(c["k"]);
    const std::vector<float> v = F32(c["v"]), gate = F32(c["g"]), beta = F32(c["beta"]),
                             init = F32(c["initial_state"]);
    ASSERT_EQ(q.size(), size_t(t * kh * dk));
    ASSERT_EQ(v.size(), size_t(t * vh * dv));
    ASSERT_EQ(init.size(), size_t(vh * dk * dv));
    const int qk_heads = c.value("repeated_by_script", false) ? vh : kh;
    if (qk_heads != vh) {
      q = RepeatHeads(q, t, kh, vh, dk);
      k = RepeatHeads(k, t, kh, vh, dk);
    }
    L2NormRows(q.data(), t * vh, dk);
    L2NormRows(k.data(), t * vh, dk);
    for (const auto& r : c["runs"]) {
      const bool with_state = r["initial_state"];
      SCOPED_TRACE(with_state ? "with an initial state" : "from a zero state");
      const std::vector<float> s0 = with_state ? init : std::vector<float>(init.size(), 0.0f);
      std::vector<float> rs = s0, ro(t * vh * dv), cs = s0, co(t * vh * dv);
      GatedDeltaRecurrent(s, t, q.data(), k.data(), v.data(), gate.data(), beta.data(), rs.data(),
                          ro.data());
      GatedDeltaChunked(s, t, q.data(), k.data(), v.data(), gate.data(), beta.data(), cs.data(),
                        co.data(), chunk);
      const double e[4] = {MaxErr(ro, F32(r["recurrent_out"])),
                           MaxErr(rs, F32(r["recurrent_state"])), MaxErr(co, F32(r["chunk_out"])),
                           MaxErr(cs, F32(r["chunk_state"]))};
      EXPECT_LT(e[0], kTol) << "recurrent output";
      EXPECT_LT(e[1], kTol) << "recurrent final state";
      EXPECT_LT(e[2], kTol) << "chunked output";
      EXPECT_LT(e[3], kTol) << "chunked final state";
      worst_rec = std::max({worst_rec, e[0], e[1]});
      worst_chunk = std::max({worst_chunk, e[2], e[3]});
      ++runs;
    }
  }
  EXPECT_GE(runs, 10) << "the golden judged too few runs";
  std::printf("gated delta vs HF over %d runs: recurrent %.3g, chunked %.3g\n", runs, worst_rec,
              worst_chunk);
}

// The conv over the whole prompt (HF causal_conv1d_fn), and over its first `split` tokens then one
// token at a time from the carried state (HF causal_conv1d_update on the cache's conv_state).
TEST(GatedDeltaGolden, CausalConvMatchesTransformers) {
  const nlohmann::json& g = Golden();
  ASSERT_TRUE(g.contains("conv") && g["conv"].is_object()) << "no conv case in the golden";
  const auto& c = g["conv"];
  const int ch = c["channels"], kernel = c["kernel"];
  const int64_t t = c["tokens"], split = c["split"];
  const std::vector<float> x = F32(c["x"]), w = F32(c["weight"]);
  ASSERT_EQ(x.size(), size_t(t * ch));
  ASSERT_EQ(w.size(), size_t(ch * kernel));
  std::vector<float> whole(t * ch), state(ch * (kernel - 1), 0.0f);
  CausalConv1dSilu(ch, kernel, t, x.data(), w.data(), state.data(), whole.data());
  EXPECT_LT(MaxErr(whole, F32(c["prefill_out"])), kTol);
  std::vector<float> parts(t * ch), st(ch * (kernel - 1), 0.0f);
  CausalConv1dSilu(ch, kernel, split, x.data(), w.data(), st.data(), parts.data());
  for (int64_t i = split; i < t; ++i) {
    CausalConv1dSilu(ch, kernel, 1, x.data() + i * ch, w.data(), st.data(), parts.data() + i * ch);
  }
  EXPECT_LT(MaxErr(parts, F32(c["split_out"])), kTol);
  // HF's conv_state keeps the last `kernel` inputs per channel; ours the last kernel - 1.
  const std::vector<float> hf_state = F32(c["final_conv_state"]);
  ASSERT_EQ(hf_state.size(), size_t(ch * kernel));
  std::vector<float> tail;
  for (int i = 0; i < ch; ++i) {
    tail.insert(tail.end(), hf_state.begin() + i * kernel + 1, hf_state.begin() + (i + 1) * kernel);
  }
  EXPECT_EQ(st, tail);
}

TEST(GatedDeltaGolden, GatedRmsNormMatchesTransformers) {
  const nlohmann::json& g = Golden();
  ASSERT_TRUE(g.contains("rms_norm_gated") && g["rms_norm_gated"].is_object())
      << "no gated RMSNorm case in the golden";
  const auto& c = g["rms_norm_gated"];
  const int64_t rows = c["rows"];
  const int dim = c["dim"];
  const std::vector<float> x = F32(c["x"]), z = F32(c["z"]), w = F32(c["weight"]);
  ASSERT_EQ(x.size(), size_t(rows * dim));
  std::vector<float> out(rows * dim);
  GatedRmsNorm(x.data(), z.data(), w.data(), rows, dim, c["eps"].get<float>(), out.data());
  EXPECT_LT(MaxErr(out, F32(c["out"])), kTol);
}

// y[r][o] = sum_i x[r][i] w[o][i] (a Linear's [out][in] weight).
std::vector<float> Linear(const std::vector<float>& x, int64_t rows, int in,
                          const std::vector<float>& w, int out) {
  EXPECT_EQ(w.size(), size_t(int64_t{in} * out));
  std::vector<float> y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      float acc = 0.0f;
      for (int i = 0; i < in; ++i) acc += x[r * in + i] * w[int64_t{o} * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

// One Qwen3_5GatedDeltaNet forward (no cache) composed from our pieces: the projections, the conv
// over the q|k|v channels, the gates beta = sigmoid(b) and g = -exp(A_log) softplus(a + dt_bias),
// grouped heads, the L2-normalized chunked rule from a zero state, the gated norm per value head
// and out_proj.
TEST(GatedDeltaGolden, WholeLayerComposesLikeTransformers) {
  const nlohmann::json& g = Golden();
  ASSERT_TRUE(g.contains("layer") && g["layer"].is_object()) << "no layer case in the golden";
  const auto& c = g["layer"];
  const int64_t t = c["tokens"];
  const int hidden = c["hidden_size"], kh = c["linear_num_key_heads"],
            vh = c["linear_num_value_heads"], dk = c["linear_key_head_dim"],
            dv = c["linear_value_head_dim"], kernel = c["linear_conv_kernel_dim"];
  const int key_dim = kh * dk, value_dim = vh * dv, conv_dim = 2 * key_dim + value_dim;
  auto weight = [&](const char* n) { return F32(c["weights"][n]["data"]); };
  const std::vector<float> x = F32(c["x"]);
  ASSERT_EQ(x.size(), size_t(t * hidden));
  const std::vector<float> qkv = Linear(x, t, hidden, weight("in_proj_qkv.weight"), conv_dim);
  const std::vector<float> z = Linear(x, t, hidden, weight("in_proj_z.weight"), value_dim);
  const std::vector<float> b = Linear(x, t, hidden, weight("in_proj_b.weight"), vh);
  const std::vector<float> a = Linear(x, t, hidden, weight("in_proj_a.weight"), vh);
  std::vector<float> mixed(t * conv_dim), conv_state(conv_dim * (kernel - 1), 0.0f);
  CausalConv1dSilu(conv_dim, kernel, t, qkv.data(), weight("conv1d.weight").data(),
                   conv_state.data(), mixed.data());
  std::vector<float> q(t * key_dim), k(t * key_dim), v(t * value_dim);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = &mixed[i * conv_dim];
    std::copy_n(row, key_dim, &q[i * key_dim]);
    std::copy_n(row + key_dim, key_dim, &k[i * key_dim]);
    std::copy_n(row + 2 * key_dim, value_dim, &v[i * value_dim]);
  }
  if (kh != vh) {
    q = RepeatHeads(q, t, kh, vh, dk);
    k = RepeatHeads(k, t, kh, vh, dk);
  }
  L2NormRows(q.data(), t * vh, dk);
  L2NormRows(k.data(), t * vh, dk);
  const std::vector<float> a_log = weight("A_log"), dt_bias = weight("dt_bias");
  std::vector<float> beta(t * vh), gate(t * vh);
  for (int64_t i = 0; i < t; ++i) {
    for (int h = 0; h < vh; ++h) {
      beta[i * vh + h] = 1.0f / (1.0f + std::exp(-b[i * vh + h]));
      const float u = a[i * vh + h] + dt_bias[h];
      const float softplus = u > 20.0f ? u : std::log1p(std::exp(u));  // torch's threshold
      gate[i * vh + h] = -std::exp(a_log[h]) * softplus;
    }
  }
  std::vector<float> state(int64_t{vh} * dk * dv, 0.0f), core(t * value_dim);
  GatedDeltaChunked({vh, dk, dv}, t, q.data(), k.data(), v.data(), gate.data(), beta.data(),
                    state.data(), core.data());
  std::vector<float> normed(t * value_dim);
  GatedRmsNorm(core.data(), z.data(), weight("norm.weight").data(), t * vh, dv,
               c["rms_norm_eps"].get<float>(), normed.data());
  const std::vector<float> out = Linear(normed, t, value_dim, weight("out_proj.weight"), hidden);
  const double e = MaxErr(out, F32(c["out"]));
  EXPECT_LT(e, kTol);
  std::printf("Qwen3_5GatedDeltaNet layer (%lld tokens) vs HF: %.3g\n", static_cast<long long>(t),
              e);
}

}  // namespace
}  // namespace dq::cpu
