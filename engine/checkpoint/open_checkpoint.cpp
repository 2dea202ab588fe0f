#include "engine/checkpoint/open_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/checkpoint/gguf_file.h"
#include "engine/checkpoint/safetensors_checkpoint.h"

namespace dq {
namespace {

namespace fs = std::filesystem;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool HasGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

// Safetensors starts with a little-endian header length followed by '{'.
bool LooksLikeSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[9] = {};
  return in.read(head, 9) && head[8] == '{';
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenDirectory(const std::string& path) {
  std::error_code ec;
  const fs::path dir(path);
  if (fs::exists(dir / "model.safetensors.index.json", ec) ||
      fs::exists(dir / "model.safetensors", ec)) {
    DQ_ASSIGN_OR_RETURN(auto st, SafetensorsCheckpoint::Open(path));
    return std::unique_ptr<Checkpoint>(std::move(st));
  }
  std::vector<std::string> ggufs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".gguf") ggufs.push_back(e.path());
  }
  if (ggufs.size() == 1) {
    DQ_ASSIGN_OR_RETURN(auto g, GgufFile::Open(ggufs[0]));
    return std::unique_ptr<Checkpoint>(std::move(g));
  }
  if (ggufs.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("directory ", path, " holds ", ggufs.size(),
                                                   " .gguf files; pass the one to load"));
  }
  return absl::NotFoundError(
      absl::StrCat("directory ", path,
                   " has no model.safetensors, model.safetensors.index.json or .gguf "
                   "file; pass a .gguf file or a directory with config.json and *.safetensors"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return absl::NotFoundError(absl::StrCat(
        "model path ", path,
        " does not exist; pass a .gguf file or a directory with config.json and *.safetensors"));
  }
  if (fs::is_directory(st)) return OpenDirectory(path);
  if (HasGgufMagic(path) || EndsWith(path, ".gguf")) {
    DQ_ASSIGN_OR_RETURN(auto g, GgufFile::Open(path));
    return std::unique_ptr<Checkpoint>(std::move(g));
  }
  if (EndsWith(path, ".safetensors") || EndsWith(path, ".index.json") ||
      LooksLikeSafetensors(path)) {
    DQ_ASSIGN_OR_RETURN(auto s, SafetensorsCheckpoint::Open(path));
    return std::unique_ptr<Checkpoint>(std::move(s));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot tell the format of ", path,
      ": it is neither GGUF (no \"GGUF\" magic) nor safetensors; pass a .gguf file or a "
      "directory with config.json and *.safetensors"));
}

}  // namespace dq
