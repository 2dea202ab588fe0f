#include "engine/checkpoint/gguf_file.h"

#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/mapped_file.h"

namespace dq {
namespace {

constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT

enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// Names of ggml tensor types, for error messages (index = ggml_type).
const char* GgmlTypeName(uint32_t t) {
  static constexpr const char* kNames[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0"};
  return t < std::size(kNames) ? kNames[t] : "unknown";
}

std::optional<DType> DTypeFromGgml(uint32_t t) {
  switch (t) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 6:
      return DType::kQ5_0;
    case 7:
      return DType::kQ5_1;
    case 8:
      return DType::kQ8_0;
    case 10:
      return DType::kQ2_K;
    case 11:
      return DType::kQ3_K;
    case 12:
      return DType::kQ4_K;
    case 13:
      return DType::kQ5_K;
    case 14:
      return DType::kQ6_K;
    case 16:
      return DType::kIQ2_XXS;
    case 17:
      return DType::kIQ2_XS;
    case 18:
      return DType::kIQ3_XXS;
    case 19:
      return DType::kIQ1_S;
    case 20:
      return DType::kIQ4_NL;
    case 21:
      return DType::kIQ3_S;
    case 22:
      return DType::kIQ2_S;
    case 23:
      return DType::kIQ4_XS;
    case 29:
      return DType::kIQ1_M;
    case 30:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

// a * b, or nullopt on uint64 overflow.
std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

const char* ValueKind(const GgufValue& v) {
  static constexpr const char* kKinds[] = {
      "unsigned integer", "signed integer", "float",       "bool",        "string",
      "uint array",       "int array",      "float array", "string array"};
  return kKinds[v.index()];
}

}  // namespace

// Reads the GGUF header, metadata and tensor table from a mapped file. Every read is bounds
// checked against the mapping; errors carry the file name and byte offset.
class GgufParser {
 public:
  explicit GgufParser(GgufFile* out)
      : out_(out), data_(out->file_->data()), size_(out->file_->size()) {}

  absl::Status Parse() {
    DQ_RETURN_IF_ERROR(ParseHeader());
    for (uint64_t i = 0; i < n_kv_; ++i) DQ_RETURN_IF_ERROR(ParseKeyValue());
    DQ_RETURN_IF_ERROR(ReadAlignment());
    std::vector<uint64_t> offsets;
    for (uint64_t i = 0; i < n_tensors_; ++i) DQ_RETURN_IF_ERROR(ParseTensorInfo(&offsets));
    return PlaceTensors(offsets);
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("GGUF file ", out_->file_->path(), ": ", what,
                                                   " (at byte ", pos_, " of ", size_, ")"));
  }
  absl::Status Truncated(absl::string_view what) const {
    return Error(absl::StrCat("truncated while reading ", what,
                              "; the file is incomplete or corrupt, download or convert it again"));
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (size_ - pos_ < sizeof(T)) return Truncated(what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(absl::string_view what) {
    DQ_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > size_ - pos_) {
      return Error(absl::StrCat("string length ", len, " of ", what,
                                " runs past the end of the file; the file is corrupt"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  absl::Status ParseHeader() {
    DQ_ASSIGN_OR_RETURN(uint32_t magic, Read<uint32_t>("magic"));
    if (std::memcmp(&magic, "GGUF", 4) != 0) {
      pos_ = 0;
      return Error("bad magic, not a GGUF file (expected the bytes \"GGUF\")");
    }
    DQ_ASSIGN_OR_RETURN(out_->version_, Read<uint32_t>("version"));
    if (out_->version_ != 2 && out_->version_ != 3) {
      return Error(absl::StrCat("unsupported GGUF version ", out_->version_,
                                "; only versions 2 and 3 are supported, re-convert the model "
                                "with a current llama.cpp"));
    }
    DQ_ASSIGN_OR_RETURN(n_tensors_, Read<uint64_t>("tensor count"));
    DQ_ASSIGN_OR_RETURN(n_kv_, Read<uint64_t>("metadata count"));
    // Each tensor info takes >= 24 bytes and each key/value >= 12, so larger counts are corrupt.
    if (n_tensors_ > (size_ - pos_) / 24 || n_kv_ > (size_ - pos_) / 12) {
      return Error(absl::StrCat("tensor count ", n_tensors_, " / metadata count ", n_kv_,
                                " cannot fit in the file; the header is corrupt"));
    }
    return absl::OkStatus();
  }

  template <typename T, typename V>
  absl::StatusOr<GgufValue> ReadScalarAs(absl::string_view what) {
    DQ_ASSIGN_OR_RETURN(T v, Read<T>(what));
    return GgufValue(static_cast<V>(v));
  }

  absl::StatusOr<GgufValue> ReadScalar(uint32_t type, absl::string_view what) {
    switch (type) {
      case kU8:
        return ReadScalarAs<uint8_t, uint64_t>(what);
      case kI8:
        return ReadScalarAs<int8_t, int64_t>(what);
      case kU16:
        return ReadScalarAs<uint16_t, uint64_t>(what);
      case kI16:
        return ReadScalarAs<int16_t, int64_t>(what);
      case kU32:
        return ReadScalarAs<uint32_t, uint64_t>(what);
      case kI32:
        return ReadScalarAs<int32_t, int64_t>(what);
      case kF32:
        return ReadScalarAs<float, double>(what);
      case kU64:
        return ReadScalarAs<uint64_t, uint64_t>(what);
      case kI64:
        return ReadScalarAs<int64_t, int64_t>(what);
      case kF64:
        return ReadScalarAs<double, double>(what);
      case kBool: {
        DQ_ASSIGN_OR_RETURN(uint8_t b, Read<uint8_t>(what));
        if (b > 1) return Error(absl::StrCat("bool value ", int{b}, " of ", what, " is not 0/1"));
        return GgufValue(b != 0);
      }
      case kString: {
        DQ_ASSIGN_OR_RETURN(std::string s, ReadString(what));
        return GgufValue(std::move(s));
      }
      default:
        return Error(absl::StrCat("unknown metadata value type ", type, " for ", what));
    }
  }

  // Reads `count` scalars into the vector alternative V of the variant.
  template <typename V>
  absl::StatusOr<GgufValue> ReadArrayOf(uint32_t type, uint64_t count, absl::string_view what) {
    V vec;
    vec.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      DQ_ASSIGN_OR_RETURN(GgufValue v, ReadScalar(type, what));
      using Elem = typename V::value_type;
      if constexpr (std::is_arithmetic_v<Elem>) {
        if (auto* b = std::get_if<bool>(&v)) {
          vec.push_back(*b ? 1 : 0);  // bool arrays are stored as 0/1 integers
          continue;
        }
      }
      vec.push_back(std::get<Elem>(std::move(v)));
    }
    return GgufValue(std::move(vec));
  }

  absl::StatusOr<GgufValue> ReadArray(absl::string_view what) {
    DQ_ASSIGN_OR_RETURN(uint32_t type, Read<uint32_t>(what));
    DQ_ASSIGN_OR_RETURN(uint64_t count, Read<uint64_t>(what));
    if (type == kArray) {
      return Error(absl::StrCat("metadata ", what,
                                " is an array of arrays, which GGUF readers "
                                "(ggml included) do not support"));
    }
    const uint64_t min_elem = type == kString ? 8 : 1;  // smallest possible encoded element
    if (count > (size_ - pos_) / min_elem) {
      return Error(absl::StrCat("array length ", count, " of ", what,
                                " runs past the end of the file; the file is corrupt"));
    }
    switch (type) {
      case kU8:
      case kU16:
      case kU32:
      case kU64:
      case kBool:
        return ReadArrayOf<std::vector<uint64_t>>(type, count, what);
      case kI8:
      case kI16:
      case kI32:
      case kI64:
        return ReadArrayOf<std::vector<int64_t>>(type, count, what);
      case kF32:
      case kF64:
        return ReadArrayOf<std::vector<double>>(type, count, what);
      case kString:
        return ReadArrayOf<std::vector<std::string>>(type, count, what);
      default:
        return Error(absl::StrCat("unknown array element type ", type, " for ", what));
    }
  }

  absl::Status ParseKeyValue() {
    DQ_ASSIGN_OR_RETURN(std::string key, ReadString("metadata key"));
    const std::string what = absl::StrCat("metadata key '", key, "'");
    DQ_ASSIGN_OR_RETURN(uint32_t type, Read<uint32_t>(what));
    GgufValue value;
    if (type == kArray) {
      DQ_ASSIGN_OR_RETURN(value, ReadArray(what));
    } else {
      DQ_ASSIGN_OR_RETURN(value, ReadScalar(type, what));
    }
    if (!out_->metadata_.emplace(key, std::move(value)).second) {
      return Error(absl::StrCat("duplicate ", what, "; the file is corrupt"));
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment() {
    if (!out_->Has("general.alignment")) return absl::OkStatus();
    auto a = out_->GetInt("general.alignment");
    if (!a.ok() || *a <= 0 || (*a & (*a - 1)) != 0 || *a > (1 << 20)) {
      return Error("general.alignment must be a power of two integer up to 1 MiB");
    }
    alignment_ = static_cast<uint64_t>(*a);
    return absl::OkStatus();
  }

  absl::Status ParseTensorInfo(std::vector<uint64_t>* offsets) {
    DQ_ASSIGN_OR_RETURN(std::string name, ReadString("tensor name"));
    const std::string what = absl::StrCat("tensor '", name, "'");
    DQ_ASSIGN_OR_RETURN(uint32_t n_dims, Read<uint32_t>(what));
    if (n_dims > kMaxDims) {
      return Error(
          absl::StrCat(what, " has ", n_dims, " dimensions; at most ", kMaxDims, " are allowed"));
    }
    TensorView t;
    t.name = std::move(name);
    t.shape.resize(n_dims);
    for (uint32_t i = 0; i < n_dims; ++i) {
      DQ_ASSIGN_OR_RETURN(uint64_t ne, Read<uint64_t>(what));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(absl::StrCat(what, " has a negative or huge dimension ", ne));
      }
      t.shape[n_dims - 1 - i] = static_cast<int64_t>(ne);  // ne[0] is innermost
    }
    DQ_ASSIGN_OR_RETURN(uint32_t type, Read<uint32_t>(what));
    DQ_ASSIGN_OR_RETURN(uint64_t offset, Read<uint64_t>(what));
    auto dtype = DTypeFromGgml(type);
    if (!dtype) {
      return Error(
          absl::StrCat("unsupported tensor type ", type, " (", GgmlTypeName(type), ") for ", what,
                       "; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, "
                       "Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, "
                       "IQ3_S, IQ4_NL, IQ4_XS "
                       "(re-quantize the model to one of these)"));
    }
    t.dtype = *dtype;
    DQ_RETURN_IF_ERROR(ComputeBytes(what, &t));
    if (offset % alignment_ != 0) {
      return Error(absl::StrCat(what, " data offset ", offset, " is not a multiple of the ",
                                "alignment ", alignment_));
    }
    if (!out_->index_.emplace(t.name, out_->tensors_.size()).second) {
      return Error(absl::StrCat("duplicate ", what));
    }
    out_->tensors_.push_back(std::move(t));
    offsets->push_back(offset);
    return absl::OkStatus();
  }

  // Sets t->nbytes from shape and dtype, rejecting overflow and partial blocks.
  absl::Status ComputeBytes(const std::string& what, TensorView* t) const {
    const int64_t blk = DTypeBlockElems(t->dtype);
    const int64_t row = t->shape.empty() ? 1 : t->shape.back();
    if (row % blk != 0) {
      return Error(absl::StrCat(what, " has rows of ", row, " values, not a multiple of the ",
                                std::string(DTypeName(t->dtype)), " block size ", blk));
    }
    std::optional<uint64_t> bytes = static_cast<uint64_t>(DTypeBlockBytes(t->dtype));
    bytes = CheckedMul(*bytes, static_cast<uint64_t>(row / blk));
    for (size_t i = 0; bytes && i + 1 < t->shape.size(); ++i) {
      bytes = CheckedMul(*bytes, static_cast<uint64_t>(t->shape[i]));
    }
    std::optional<uint64_t> numel = 1;
    for (size_t i = 0; numel && i < t->shape.size(); ++i) {
      numel = CheckedMul(*numel, static_cast<uint64_t>(t->shape[i]));
    }
    constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (!bytes || !numel || *bytes > kMax || *numel > kMax) {
      return Error(absl::StrCat(what, " is impossibly large; the file is corrupt"));
    }
    t->nbytes = static_cast<int64_t>(*bytes);
    return absl::OkStatus();
  }

  absl::Status PlaceTensors(const std::vector<uint64_t>& offsets) {
    const uint64_t data_start = (pos_ + alignment_ - 1) / alignment_ * alignment_;
    if (out_->tensors_.empty()) return absl::OkStatus();
    if (data_start > size_) return Truncated("the padding before tensor data");
    const uint64_t avail = size_ - data_start;
    for (size_t i = 0; i < offsets.size(); ++i) {
      TensorView& t = out_->tensors_[i];
      const uint64_t nbytes = static_cast<uint64_t>(t.nbytes);
      if (offsets[i] > avail || nbytes > avail - offsets[i]) {
        return Error(absl::StrCat("data of tensor '", t.name, "' (", nbytes, " bytes at offset ",
                                  offsets[i],
                                  ") runs past the end of the file; the file is "
                                  "truncated, download or convert it again"));
      }
      t.data = data_ + data_start + offsets[i];
    }
    return absl::OkStatus();
  }

  GgufFile* out_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
};

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  DQ_ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  GgufParser parser(f.get());
  DQ_RETURN_IF_ERROR(parser.Parse());
  return f;
}

GgufFile::~GgufFile() = default;

const TensorView* GgufFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- Typed metadata getters ----

namespace {

absl::StatusOr<const GgufValue*> Lookup(const std::map<std::string, GgufValue>& md,
                                        const std::string& key) {
  auto it = md.find(key);
  if (it == md.end()) {
    return absl::NotFoundError(absl::StrCat("GGUF metadata key '", key,
                                            "' is missing; the "
                                            "model file may be for a different architecture"));
  }
  return &it->second;
}

absl::Status WrongType(const std::string& key, const GgufValue& v, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("GGUF metadata key '", key, "' is a ", ValueKind(v), ", expected ", want));
}

template <typename Out, typename In>
absl::StatusOr<std::vector<Out>> ConvertInts(const std::string& key, const std::vector<In>& in) {
  std::vector<Out> out;
  out.reserve(in.size());
  for (In x : in) {
    if constexpr (std::is_same_v<In, uint64_t> && std::is_same_v<Out, int64_t>) {
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::OutOfRangeError(
            absl::StrCat("GGUF metadata key '", key, "' holds ", x, ", too large for int64"));
      }
    }
    out.push_back(static_cast<Out>(x));
  }
  return out;
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  if (auto* u = std::get_if<uint64_t>(v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::OutOfRangeError(
          absl::StrCat("GGUF metadata key '", key, "' holds ", *u, ", too large for int64"));
    }
    return static_cast<int64_t>(*u);
  }
  return WrongType(key, *v, "an integer");
}

absl::StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  if (auto* u = std::get_if<uint64_t>(v)) return static_cast<double>(*u);
  return WrongType(key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* b = std::get_if<bool>(v)) return *b;
  return WrongType(key, *v, "a bool");
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* s = std::get_if<std::string>(v)) return *s;
  return WrongType(key, *v, "a string");
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStringArray(
    const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* s = std::get_if<std::vector<std::string>>(v)) return s;
  return WrongType(key, *v, "a string array");
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* i = std::get_if<std::vector<int64_t>>(v)) return *i;
  if (auto* u = std::get_if<std::vector<uint64_t>>(v)) return ConvertInts<int64_t>(key, *u);
  return WrongType(key, *v, "an integer array");
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(const std::string& key) const {
  DQ_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(metadata_, key));
  if (auto* d = std::get_if<std::vector<double>>(v)) return *d;
  if (auto* i = std::get_if<std::vector<int64_t>>(v)) return ConvertInts<double>(key, *i);
  if (auto* u = std::get_if<std::vector<uint64_t>>(v)) return ConvertInts<double>(key, *u);
  return WrongType(key, *v, "a float array");
}

}  // namespace dq
