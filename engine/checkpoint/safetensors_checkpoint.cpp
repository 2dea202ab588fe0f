#include "engine/checkpoint/safetensors_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "common/mapped_file.h"

namespace dq {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The safetensors spec caps the JSON header at 100 MB; larger values mean a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::optional<DType> DTypeFromName(std::string_view s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "I32") return DType::kI32;
  if (s == "I16") return DType::kI16;
  if (s == "U8") return DType::kU8;
  if (s == "I8") return DType::kI8;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  return std::nullopt;
}

std::optional<std::string_view> NameFromDType(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI16:
      return "I16";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
    case DType::kF8E4M3:
      return "F8_E4M3";
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// A JSON value as a non-negative integer that fits int64, or nullopt.
std::optional<uint64_t> AsCount(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return u;
}

absl::Status HeaderError(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors file ", path, ": ", what,
                   "; the file is corrupt or not safetensors, download or convert it again"));
}

// Fills `t` (everything but the data pointer) from one header entry; `*begin` gets the offset.
absl::Status ParseEntry(const std::string& path, const std::string& name, const json& e,
                        uint64_t data_size, TensorView* t, uint64_t* begin) {
  const std::string what = absl::StrCat("tensor '", name, "'");
  if (!e.is_object()) return HeaderError(path, absl::StrCat(what, " is not a JSON object"));
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string() || sh == e.end() || !sh->is_array() || off == e.end() ||
      !off->is_array() || off->size() != 2) {
    return HeaderError(path, absl::StrCat(what, " lacks dtype, shape or data_offsets[2]"));
  }
  const std::string& dname = dt->get_ref<const std::string&>();
  auto dtype = DTypeFromName(dname);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file ", path, ": ", what, " has dtype ", dname,
                     ", which is not supported; supported: F32, F16, BF16, I32, I16, U8, I8, "
                     "F8_E4M3 (convert the checkpoint)"));
  }
  t->name = name;
  t->dtype = *dtype;
  std::optional<uint64_t> bytes = static_cast<uint64_t>(DTypeBlockBytes(*dtype));
  for (const json& d : *sh) {
    auto n = AsCount(d);
    if (!n) return HeaderError(path, absl::StrCat(what, " has a bad shape ", sh->dump()));
    t->shape.push_back(static_cast<int64_t>(*n));
    if (bytes) bytes = CheckedMul(*bytes, *n);
  }
  auto b = AsCount((*off)[0]);
  auto end = AsCount((*off)[1]);
  if (!b || !end || *b > *end || *end > data_size) {
    return HeaderError(path, absl::StrCat(what, " has data_offsets ", off->dump(), " outside the ",
                                          data_size, "-byte data section"));
  }
  if (!bytes || *bytes != *end - *b) {
    return HeaderError(path, absl::StrCat(what, " holds ", *end - *b, " bytes but its shape ",
                                          sh->dump(), " and dtype ", dname, " need ",
                                          bytes ? absl::StrCat(*bytes) : "too many"));
  }
  t->nbytes = static_cast<int64_t>(*bytes);
  *begin = *b;
  return absl::OkStatus();
}

absl::StatusOr<json> ParseHeaderJson(const MappedFile& f, uint64_t* data_start) {
  if (f.size() < 8) return HeaderError(f.path(), "shorter than the 8-byte header length");
  uint64_t n;
  std::memcpy(&n, f.data(), sizeof n);
  if (n > f.size() - 8 || n > kMaxHeaderBytes) {
    return HeaderError(f.path(),
                       absl::StrCat("header length ", n, " exceeds the file size ", f.size()));
  }
  const char* p = reinterpret_cast<const char*>(f.data() + 8);
  json header = json::parse(p, p + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return HeaderError(f.path(), "the header is not a valid JSON object");
  }
  *data_start = 8 + n;
  return header;
}

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a valid JSON object"));
  }
  return j;
}

// Shard file names from an index's weight_map, deduplicated, in sorted order.
absl::StatusOr<std::vector<std::string>> ShardNames(const std::string& index_path,
                                                    const json& index) {
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object() || wm->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, " has no weight_map object mapping tensor names to shards"));
  }
  std::set<std::string> names;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry '", tensor, "' is not a file name"));
    }
    const std::string& s = file.get_ref<const std::string&>();
    // Shards must live next to the index; refusing paths keeps a bad index from reading
    // arbitrary files.
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": shard name '", s, "' must be a plain file name"));
    }
    names.insert(s);
  }
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace

SafetensorsCheckpoint::~SafetensorsCheckpoint() = default;

absl::Status SafetensorsCheckpoint::AddShard(const std::string& path) {
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> f, MappedFile::Open(path));
  uint64_t data_start = 0;
  DQ_ASSIGN_OR_RETURN(json header, ParseHeaderJson(*f, &data_start));
  const uint64_t data_size = f->size() - data_start;
  std::vector<std::pair<uint64_t, TensorView>> shard;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return HeaderError(path, "__metadata__ is not a JSON object");
      for (const auto& [k, v] : entry.items()) {
        metadata_.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
      }
      continue;
    }
    TensorView t;
    uint64_t begin = 0;
    DQ_RETURN_IF_ERROR(ParseEntry(path, name, entry, data_size, &t, &begin));
    t.data = f->data() + data_start + begin;
    shard.emplace_back(begin, std::move(t));
  }
  std::stable_sort(shard.begin(), shard.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [begin, t] : shard) tensors_.push_back(std::move(t));
  files_.push_back(std::move(f));
  return absl::OkStatus();
}

absl::Status SafetensorsCheckpoint::BuildIndex() {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!index_.emplace(tensors_[i].name, i).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensors_[i].name, "' appears in more than one shard; the index is corrupt"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return absl::NotFoundError(absl::StrCat("safetensors path ", path, " does not exist"));
  }
  std::string index_path;
  std::string single_path = path;
  if (fs::is_directory(st)) {
    const fs::path dir(path);
    if (fs::exists(dir / kIndexName, ec)) {
      index_path = (dir / kIndexName).string();
    } else if (fs::exists(dir / kSingleName, ec)) {
      single_path = (dir / kSingleName).string();
    } else {
      return absl::NotFoundError(
          absl::StrCat("directory ", path, " has neither ", kSingleName, " nor ", kIndexName));
    }
  } else if (path.size() >= 11 && path.compare(path.size() - 11, 11, ".index.json") == 0) {
    index_path = path;
  }
  std::unique_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  if (index_path.empty()) {
    DQ_RETURN_IF_ERROR(ckpt->AddShard(single_path));
    DQ_RETURN_IF_ERROR(ckpt->BuildIndex());
    return ckpt;
  }
  DQ_ASSIGN_OR_RETURN(json index, ReadJsonFile(index_path));
  DQ_ASSIGN_OR_RETURN(std::vector<std::string> shards, ShardNames(index_path, index));
  const fs::path dir = fs::path(index_path).parent_path();
  for (const std::string& s : shards) DQ_RETURN_IF_ERROR(ckpt->AddShard((dir / s).string()));
  DQ_RETURN_IF_ERROR(ckpt->BuildIndex());
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (ckpt->Find(tensor) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, " lists tensor '", tensor, "' in ", file.get<std::string>(),
                       ", but that shard does not contain it; the checkpoint is incomplete"));
    }
  }
  return ckpt;
}

const TensorView* SafetensorsCheckpoint::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> SafetensorsCheckpoint::file_paths() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

// ---- Writer ----

namespace {

// Builds the padded JSON header; `sizes` gets each entry's byte size.
absl::StatusOr<std::string> BuildHeader(const std::vector<SafetensorsEntry>& entries,
                                        const std::map<std::string, std::string>& metadata,
                                        std::vector<uint64_t>* sizes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    auto dname = NameFromDType(e.dtype);
    if (!dname) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write tensor '", e.name, "' as ", std::string(DTypeName(e.dtype)),
                       " to safetensors; supported: F32, F16, BF16, I32, I16, U8, I8, F8_E4M3"));
    }
    if (e.name.empty() || e.name == "__metadata__" || header.contains(e.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor name '", e.name, "' is empty, reserved or duplicated"));
    }
    uint64_t bytes = static_cast<uint64_t>(DTypeBlockBytes(e.dtype));
    for (int64_t d : e.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(e.name, " has a negative dim"));
      bytes *= static_cast<uint64_t>(d);
    }
    if (bytes > 0 && e.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has no data"));
    }
    header[e.name] = {{"dtype", std::string(*dname)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes->push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad so the data section starts 8-byte aligned (the 8-byte length prefix keeps it so).
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> sizes;
  DQ_ASSIGN_OR_RETURN(std::string header, BuildHeader(entries, metadata, &sizes));
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const uint64_t n = header.size();
  bool ok = std::fwrite(&n, sizeof n, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (size_t i = 0; ok && i < entries.size(); ++i) {
    ok = sizes[i] == 0 || std::fwrite(entries[i].data, 1, sizes[i], f) == sizes[i];
  }
  ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("writing ", path,
                                            " failed (disk full or "
                                            "unwritable directory?)"));
  }
  return absl::OkStatus();
}

}  // namespace dq
