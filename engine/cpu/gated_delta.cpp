#include "engine/cpu/gated_delta.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/vec_ops.h"

namespace dq::cpu {
namespace {

// One head's inputs of one chunk, gathered contiguous and zero-padded to `c` tokens.
struct ChunkInputs {
  std::vector<float> q, k, v, g, beta;  // [c][dk], [c][dk], [c][dv], [c], [c]
};

ChunkInputs Gather(const GatedDeltaShape& s, int h, int64_t t0, int n, int c, const float* q,
                   const float* k, const float* v, const float* g, const float* beta) {
  ChunkInputs in;
  in.q.assign(int64_t{c} * s.dk, 0.0f);
  in.k.assign(int64_t{c} * s.dk, 0.0f);
  in.v.assign(int64_t{c} * s.dv, 0.0f);
  in.g.assign(c, 0.0f);
  in.beta.assign(c, 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
  for (int i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    const float* qt = q + (t * s.heads + h) * s.dk;
    const float* kt = k + (t * s.heads + h) * s.dk;
    for (int d = 0; d < s.dk; ++d) {
      in.q[int64_t{i} * s.dk + d] = qt[d] * scale;
      in.k[int64_t{i} * s.dk + d] = kt[d];
    }
    const float* vt = v + (t * s.heads + h) * s.dv;
    for (int d = 0; d < s.dv; ++d) in.v[int64_t{i} * s.dv + d] = vt[d];
    in.g[i] = g[t * s.heads + h];
    in.beta[i] = beta[t * s.heads + h];
  }
  return in;
}

// The chunk's WY factors: u = A (beta v) and w = A (beta k exp(G)), A = (I + L)^-1 of the
// strictly lower -(beta k k^T) decay matrix, solved row by row as HF does.
void WyFactors(const GatedDeltaShape& s, int c, const ChunkInputs& in, const std::vector<float>& G,
               std::vector<float>& u, std::vector<float>& w) {
  std::vector<float> a(int64_t{c} * c, 0.0f);
  for (int i = 0; i < c; ++i) {
    for (int j = 0; j < i; ++j) {
      const float kk =
          in.beta[i] * DotF32(&in.k[int64_t{i} * s.dk], &in.k[int64_t{j} * s.dk], s.dk);
      a[int64_t{i} * c + j] = -kk * std::exp(G[i] - G[j]);
    }
  }
  std::vector<float> row(c);
  for (int i = 1; i < c; ++i) {
    for (int j = 0; j < i; ++j) row[j] = a[int64_t{i} * c + j];
    for (int j = 0; j < i; ++j) {
      float acc = row[j];
      for (int m = j + 1; m < i; ++m) acc += row[m] * a[int64_t{m} * c + j];
      a[int64_t{i} * c + j] = acc;
    }
  }
  for (int i = 0; i < c; ++i) a[int64_t{i} * c + i] = 1.0f;
  u.assign(int64_t{c} * s.dv, 0.0f);
  w.assign(int64_t{c} * s.dk, 0.0f);
  for (int i = 0; i < c; ++i) {
    for (int j = 0; j <= i; ++j) {
      const float aij = a[int64_t{i} * c + j];
      const float bv = aij * in.beta[j], bk = aij * in.beta[j] * std::exp(G[j]);
      for (int d = 0; d < s.dv; ++d) u[int64_t{i} * s.dv + d] += bv * in.v[int64_t{j} * s.dv + d];
      for (int d = 0; d < s.dk; ++d) w[int64_t{i} * s.dk + d] += bk * in.k[int64_t{j} * s.dk + d];
    }
  }
}

// One chunk of one head: its outputs for the first `n` tokens, and the state carried past it.
void Chunk(const GatedDeltaShape& s, int h, int64_t t0, int n, int c, const ChunkInputs& in,
           float* S, float* out) {
  std::vector<float> G(c);
  float acc = 0.0f;
  for (int i = 0; i < c; ++i) G[i] = acc += in.g[i];
  std::vector<float> u, w;
  WyFactors(s, c, in, G, u, w);
  // v_new = u - w S: what each token adds beyond what the entering state predicts.
  std::vector<float> vn(u);
  for (int i = 0; i < c; ++i) {
    for (int d = 0; d < s.dk; ++d) {
      const float wd = w[int64_t{i} * s.dk + d];
      for (int e = 0; e < s.dv; ++e) vn[int64_t{i} * s.dv + e] -= wd * S[int64_t{d} * s.dv + e];
    }
  }
  for (int i = 0; i < n; ++i) {
    float* o = out + ((t0 + i) * s.heads + h) * s.dv;
    const float* qi = &in.q[int64_t{i} * s.dk];
    const float gi = std::exp(G[i]);
    for (int e = 0; e < s.dv; ++e) {
      float x = 0.0f;
      for (int d = 0; d < s.dk; ++d) x += qi[d] * gi * S[int64_t{d} * s.dv + e];
      o[e] = x;
    }
    for (int j = 0; j <= i; ++j) {
      const float aij = DotF32(qi, &in.k[int64_t{j} * s.dk], s.dk) * std::exp(G[i] - G[j]);
      for (int e = 0; e < s.dv; ++e) o[e] += aij * vn[int64_t{j} * s.dv + e];
    }
  }
  const float last = G[c - 1];
  for (int d = 0; d < s.dk; ++d) {
    for (int e = 0; e < s.dv; ++e) {
      float x = S[int64_t{d} * s.dv + e] * std::exp(last);
      for (int i = 0; i < c; ++i) {
        x += in.k[int64_t{i} * s.dk + d] * std::exp(last - G[i]) * vn[int64_t{i} * s.dv + e];
      }
      S[int64_t{d} * s.dv + e] = x;
    }
  }
}

}  // namespace

void GatedDeltaRecurrent(const GatedDeltaShape& s, int64_t tokens, const float* q, const float* k,
                         const float* v, const float* g, const float* beta, float* state,
                         float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
  std::vector<float> mem(s.dv);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < s.heads; ++h) {
      float* S = state + int64_t{h} * s.dk * s.dv;
      const float* kt = k + (t * s.heads + h) * s.dk;
      const float* qt = q + (t * s.heads + h) * s.dk;
      const float* vt = v + (t * s.heads + h) * s.dv;
      const float decay = std::exp(g[t * s.heads + h]), b = beta[t * s.heads + h];
      for (int64_t i = 0; i < int64_t{s.dk} * s.dv; ++i) S[i] *= decay;
      std::fill(mem.begin(), mem.end(), 0.0f);
      for (int d = 0; d < s.dk; ++d) {
        for (int e = 0; e < s.dv; ++e) mem[e] += S[int64_t{d} * s.dv + e] * kt[d];
      }
      for (int e = 0; e < s.dv; ++e) mem[e] = (vt[e] - mem[e]) * b;  // the delta
      float* o = out + (t * s.heads + h) * s.dv;
      std::fill(o, o + s.dv, 0.0f);
      for (int d = 0; d < s.dk; ++d) {
        for (int e = 0; e < s.dv; ++e) {
          float& x = S[int64_t{d} * s.dv + e];
          x += kt[d] * mem[e];
          o[e] += x * qt[d] * scale;
        }
      }
    }
  }
}

void GatedDeltaChunked(const GatedDeltaShape& s, int64_t tokens, const float* q, const float* k,
                       const float* v, const float* g, const float* beta, float* state, float* out,
                       int chunk) {
  for (int h = 0; h < s.heads; ++h) {
    float* S = state + int64_t{h} * s.dk * s.dv;
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
      const int n = static_cast<int>(std::min<int64_t>(chunk, tokens - t0));
      const ChunkInputs in = Gather(s, h, t0, n, chunk, q, k, v, g, beta);
      Chunk(s, h, t0, n, chunk, in, S, out);
    }
  }
}

void L2NormRows(float* x, int64_t rows, int dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * dim;
    const float inv = 1.0f / std::sqrt(DotF32(xr, xr, dim) + eps);
    for (int d = 0; d < dim; ++d) xr[d] *= inv;
  }
}

void CausalConv1dSilu(int channels, int kernel, int64_t tokens, const float* x, const float* weight,
                      float* state, float* out) {
  const int hist = kernel - 1;
  std::vector<float> window(kernel);
  for (int c = 0; c < channels; ++c) {
    float* st = state + int64_t{c} * hist;
    const float* w = weight + int64_t{c} * kernel;
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(st, st + hist, window.begin());
      window[hist] = x[t * channels + c];
      float acc = 0.0f;
      for (int j = 0; j < kernel; ++j) acc += w[j] * window[j];
      out[t * channels + c] = acc / (1.0f + std::exp(-acc));
      std::copy(window.begin() + 1, window.end(), st);
    }
  }
}

void GatedRmsNorm(const float* x, const float* z, const float* weight, int64_t rows, int dim,
                  float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    const float inv = 1.0f / std::sqrt(DotF32(xr, xr, dim) / static_cast<float>(dim) + eps);
    for (int d = 0; d < dim; ++d) {
      const float gate = zr[d] / (1.0f + std::exp(-zr[d]));
      out[r * dim + d] = weight[d] * (xr[d] * inv) * gate;
    }
  }
}

}  // namespace dq::cpu
