// GGUF v2/v3 reader: header, metadata, tensor table, alignment; memory-mapped, validated.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"

namespace dq {

class MappedFile;

// One metadata value. Arrays of scalars/strings are stored as vectors.
using GgufValue = std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<uint64_t>,
                               std::vector<int64_t>, std::vector<double>, std::vector<std::string>>;

class GgufFile : public Checkpoint {
 public:
  // Maps and validates `path`. Errors name the file and what is wrong (bad magic, unsupported
  // version, truncated table, tensor past end of file, unknown tensor type, ...).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  ~GgufFile() override;

  std::string_view format() const override { return "gguf"; }
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  const TensorView* Find(std::string_view name) const override;

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool Has(const std::string& key) const { return metadata_.count(key) != 0; }
  // Typed getters; integer getters accept any integer type, float getters any number.
  // The error says which key is missing or has the wrong type.
  absl::StatusOr<int64_t> GetInt(const std::string& key) const;
  absl::StatusOr<double> GetFloat(const std::string& key) const;
  absl::StatusOr<bool> GetBool(const std::string& key) const;
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<const std::vector<std::string>*> GetStringArray(const std::string& key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(const std::string& key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(const std::string& key) const;

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  friend class GgufParser;
};

}  // namespace dq
