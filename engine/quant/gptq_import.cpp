// GPTQ / AWQ checkpoint import; the layouts are documented in gptq_import.h.
#include "engine/quant/gptq_import.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/quant/int_codec.h"

namespace dq {
namespace {

// The checkpoint's tensors for one layer, unpacked into plain per-element arrays.
struct Unpacked {
  int64_t out = 0, in = 0, n_groups = 0;
  std::vector<uint8_t> codes;     // [out, in]
  std::vector<uint8_t> zeros;     // [n_groups, out]
  std::vector<uint16_t> scales;   // [n_groups, out], f16 bits
  std::vector<int32_t> group_of;  // [in]: the checkpoint group of each input
};

std::string ShapeStr(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

absl::StatusOr<const TensorView*> Need(const Checkpoint& ckpt, const std::string& name, DType dtype,
                                       size_t rank, const char* kind) {
  const TensorView* t = ckpt.Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(kind, " layer needs tensor '", name,
                                            "', which the checkpoint lacks; is the quantization ",
                                            "method in config.json right?"));
  }
  if (t->dtype != dtype || t->shape.size() != rank ||
      t->nbytes != t->numel() * DTypeBlockBytes(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " tensor '", name, "' is ", DTypeName(t->dtype), " ", ShapeStr(t->shape),
                     ", expected a rank-", rank, " ", DTypeName(dtype), " tensor"));
  }
  return t;
}

absl::Status ShapeError(const TensorView& t, const std::string& expected, const char* kind) {
  return absl::InvalidArgumentError(absl::StrCat(kind, " tensor '", t.name, "' has shape ",
                                                 ShapeStr(t.shape), ", expected ", expected));
}

uint32_t Word(const TensorView& t, int64_t i) {
  uint32_t w;
  std::memcpy(&w, t.data + 4 * i, 4);
  return w;
}

// Decodes 32 `bits`-bit fields from `bits` consecutive words read by `word(j)`: together the
// words form one little-endian, LSB-first stream of 32 * bits bits.
template <typename WordFn>
void Decode32(WordFn word, int bits, uint8_t* dst) {
  uint32_t w[8];
  for (int j = 0; j < bits; ++j) w[j] = word(j);
  const uint32_t mask = (1u << bits) - 1;
  for (int e = 0; e < 32; ++e) {
    const int bit = e * bits, k = bit / 32, off = bit % 32;
    uint64_t v = w[k];
    if (off + bits > 32) v |= static_cast<uint64_t>(w[k + 1]) << 32;
    dst[e] = static_cast<uint8_t>((v >> off) & mask);
  }
}

// GPTQ: qweight [in*bits/32, out] packed along `in`; qzeros [n_groups, out*bits/32] along `out`.
absl::Status UnpackGptq(const TensorView& qw, const TensorView* qz, int bits, bool sym,
                        Unpacked* u) {
  u->out = qw.shape[1];
  u->in = qw.shape[0] * 32 / bits;
  u->codes.resize(u->out * u->in);
  for (int64_t b = 0; b < u->in / 32; ++b) {  // 32 inputs = `bits` rows of qweight
    for (int64_t o = 0; o < u->out; ++o) {
      Decode32([&](int j) { return Word(qw, (b * bits + j) * u->out + o); }, bits,
               &u->codes[o * u->in + b * 32]);
    }
  }
  u->zeros.assign(u->n_groups * u->out, static_cast<uint8_t>(1 << (bits - 1)));
  if (sym) return absl::OkStatus();
  if (qz->shape[0] != u->n_groups || qz->shape[1] * 32 != u->out * bits) {
    return ShapeError(*qz, ShapeStr({u->n_groups, u->out * bits / 32}), "GPTQ");
  }
  for (int64_t g = 0; g < u->n_groups; ++g) {
    const int64_t row = g * qz->shape[1];
    for (int64_t o = 0; o < u->out; ++o) {
      // The row is one LSB-first stream; a 3-bit field may straddle two words.
      const int64_t bit = o * bits, k = bit / 32, off = bit % 32;
      uint64_t v = Word(*qz, row + k);
      if (off + bits > 32) v |= static_cast<uint64_t>(Word(*qz, row + k + 1)) << 32;
      const uint32_t field = static_cast<uint32_t>(v >> off) & ((1u << bits) - 1);
      // v1 stores z - 1; vLLM's kernels read the masked field + 1, so all ones means 2^bits.
      if (field == 255) {
        return absl::InvalidArgumentError(absl::StrCat(
            "GPTQ tensor '", qz->name, "' stores zero point 256 (field 255 + 1) for group ", g,
            ", output ", o, ", which 8-bit weights cannot use; the checkpoint is corrupt"));
      }
      u->zeros[g * u->out + o] = static_cast<uint8_t>(field + 1);
    }
  }
  return absl::OkStatus();
}

// AWQ (GEMM): qweight [in, out/8], qzeros [n_groups, out/8], nibbles in kAwqOrder.
absl::Status UnpackAwq(const TensorView& qw, const TensorView& qz, Unpacked* u) {
  const char* kind = "AWQ";
  u->in = qw.shape[0];
  u->out = qw.shape[1] * 8;
  if (qz.shape[0] != u->n_groups || qz.shape[1] != qw.shape[1]) {
    return ShapeError(qz, ShapeStr({u->n_groups, qw.shape[1]}), kind);
  }
  u->codes.resize(u->out * u->in);
  u->zeros.resize(u->n_groups * u->out);
  const int64_t words = qw.shape[1];
  for (int64_t i = 0; i < u->in; ++i) {
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t w = Word(qw, i * words + c);
      for (int k = 0; k < 8; ++k) u->codes[(c * 8 + kAwqOrder[k]) * u->in + i] = (w >> 4 * k) & 15;
    }
  }
  for (int64_t g = 0; g < u->n_groups; ++g) {
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t w = Word(qz, g * words + c);
      for (int k = 0; k < 8; ++k) u->zeros[g * u->out + c * 8 + kAwqOrder[k]] = (w >> 4 * k) & 15;
    }
  }
  return absl::OkStatus();
}

// Fills u->group_of from g_idx (or from the group size) and checks it.
absl::Status ReadGroups(const Checkpoint& ckpt, const std::string& prefix, int64_t group, bool awq,
                        Unpacked* u) {
  u->group_of.resize(u->in);
  const TensorView* gi = awq ? nullptr : ckpt.Find(prefix + ".g_idx");
  if (gi == nullptr) {
    for (int64_t i = 0; i < u->in; ++i) u->group_of[i] = static_cast<int32_t>(i / group);
    return absl::OkStatus();
  }
  if (gi->dtype != DType::kI32 || gi->numel() != u->in || gi->nbytes != u->in * 4) {
    return absl::InvalidArgumentError(absl::StrCat("GPTQ tensor '", gi->name, "' is ",
                                                   DTypeName(gi->dtype), " ", ShapeStr(gi->shape),
                                                   ", expected I32 [", u->in, "]"));
  }
  std::memcpy(u->group_of.data(), gi->data, u->in * 4);
  for (int64_t i = 0; i < u->in; ++i) {
    if (u->group_of[i] < 0 || u->group_of[i] >= u->n_groups) {
      return absl::InvalidArgumentError(absl::StrCat("GPTQ tensor '", gi->name, "' maps input ", i,
                                                     " to group ", u->group_of[i], ", outside [0, ",
                                                     u->n_groups, ")"));
    }
  }
  return absl::OkStatus();
}

// The largest of our group sizes whose aligned runs of inputs each sit in one checkpoint group.
int PickGroup(const Unpacked& u) {
  for (int g : {128, 64, 32}) {
    if (u.in % g != 0) continue;
    bool ok = true;
    for (int64_t i = 0; i < u.in && ok; ++i) ok = u.group_of[i] == u.group_of[i - i % g];
    if (ok) return g;
  }
  return 0;
}

QuantizedTensors Convert(const Unpacked& u, int bits, int g) {
  const int64_t ng = u.in / g, row_bytes = PackedBytes(u.in, bits);
  std::vector<uint8_t> qweight(u.out * row_bytes), scales(u.out * ng * 2), zeros(u.out * ng);
  for (int64_t o = 0; o < u.out; ++o) {
    PackBits(&u.codes[o * u.in], u.in, bits, &qweight[o * row_bytes]);
    for (int64_t c = 0; c < ng; ++c) {
      const int64_t src = static_cast<int64_t>(u.group_of[c * g]) * u.out + o;
      std::memcpy(&scales[(o * ng + c) * 2], &u.scales[src], 2);
      zeros[o * ng + c] = u.zeros[src];
    }
  }
  QuantizedTensors t;
  t.view.scheme = absl::StrCat("int", bits);
  t.view.out_features = u.out;
  t.view.in_features = u.in;
  t.view.group_size = g;
  t.Add("qweight", DType::kU8, {u.out, row_bytes}, std::move(qweight));
  t.Add("scales", DType::kF16, {u.out, ng}, std::move(scales));
  t.Add("zeros", DType::kU8, {u.out, ng}, std::move(zeros));
  return t;
}

absl::Status CheckArgs(int bits, int group_size, bool sym, bool awq, const std::string& prefix) {
  if (awq && (bits != 4 || sym)) {
    return absl::UnimplementedError(absl::StrCat(
        prefix, ": AWQ import supports 4-bit weights with zero points (GEMM layout) only, got ",
        bits, "-bit", sym ? " symmetric" : ""));
  }
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) {
    return absl::UnimplementedError(
        absl::StrCat(prefix, ": GPTQ import supports 2, 3, 4 or 8 bits, got ", bits));
  }
  if (group_size == 0 || group_size < -1) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": group size ", group_size,
                                                   " is invalid; use the checkpoint's (or -1)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<QuantizedTensors> ImportGptqLinear(const Checkpoint& ckpt, const std::string& prefix,
                                                  int bits, int group_size, bool sym, bool awq) {
  DQ_RETURN_IF_ERROR(CheckArgs(bits, group_size, sym, awq, prefix));
  const char* kind = awq ? "AWQ" : "GPTQ";
  DQ_ASSIGN_OR_RETURN(const TensorView* qw, Need(ckpt, prefix + ".qweight", DType::kI32, 2, kind));
  DQ_ASSIGN_OR_RETURN(const TensorView* sc, Need(ckpt, prefix + ".scales", DType::kF16, 2, kind));
  const TensorView* qz = nullptr;
  if (!sym) {
    DQ_ASSIGN_OR_RETURN(qz, Need(ckpt, prefix + ".qzeros", DType::kI32, 2, kind));
  }
  if (qw->shape[0] <= 0 || qw->shape[1] <= 0 ||
      (awq ? (qw->shape[0] % 32 != 0) : (qw->shape[0] % bits != 0))) {
    return ShapeError(*qw,
                      awq ? "[in, out / 8] with in a multiple of 32"
                          : absl::StrCat("[in * ", bits, " / 32, out] with in a multiple of 32"),
                      kind);
  }
  Unpacked u;
  const int64_t in = awq ? qw->shape[0] : qw->shape[0] * 32 / bits;
  const int64_t group = group_size == -1 ? in : group_size;
  u.n_groups = (in + group - 1) / group;
  DQ_RETURN_IF_ERROR(awq ? UnpackAwq(*qw, *qz, &u) : UnpackGptq(*qw, qz, bits, sym, &u));
  if (sc->shape[0] != u.n_groups || sc->shape[1] != u.out) {
    return ShapeError(*sc, ShapeStr({u.n_groups, u.out}), kind);
  }
  u.scales.resize(u.n_groups * u.out);
  std::memcpy(u.scales.data(), sc->data, u.scales.size() * 2);
  DQ_RETURN_IF_ERROR(ReadGroups(ckpt, prefix, group, awq, &u));
  const int g = PickGroup(u);
  if (g == 0) {
    return absl::UnimplementedError(absl::StrCat(
        prefix, ": ", kind, " groups (group size ", group_size, ", in_features ", u.in,
        (awq ? "" : ", g_idx"), ") do not split into aligned runs of 32, 64 or 128 inputs, which ",
        "our int", bits, " layout needs; act-order (desc_act) checkpoints with interleaved groups ",
        "cannot be imported: re-quantize with desc_act=false or with dq-quantize"));
  }
  return Convert(u, bits, g);
}

}  // namespace dq
