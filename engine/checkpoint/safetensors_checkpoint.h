// Safetensors reader (single file or sharded directory) and writer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"

namespace dq {

class MappedFile;

class SafetensorsCheckpoint : public Checkpoint {
 public:
  // `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding
  // model.safetensors.index.json (sharded; each shard is mapped once) or model.safetensors.
  // Supported dtypes: F32, F16, BF16, I32; any other dtype is an error naming the tensor.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);
  ~SafetensorsCheckpoint() override;

  std::string_view format() const override { return "safetensors"; }
  // Ordered by shard (in index order), then by data offset within the shard.
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  const TensorView* Find(std::string_view name) const override;

  // The "__metadata__" entries of the header (merged over shards; the first shard wins).
  const std::map<std::string, std::string>& file_metadata() const { return metadata_; }
  // The mapped files, in shard order.
  std::vector<std::string> file_paths() const;

 private:
  SafetensorsCheckpoint() = default;
  absl::Status AddShard(const std::string& path);
  absl::Status BuildIndex();

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. `data` holds numel * element-size bytes, row-major.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes a .safetensors file (tensors in `entries` order, header padded with spaces to a
// multiple of 8 bytes). Only F32, F16, BF16 and I32 can be written. The file is written to a
// temporary name and renamed, so a failed write never leaves a partial file at `path`.
absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                              const std::map<std::string, std::string>& metadata);

}  // namespace dq
