#include "engine/spec/draft_model.h"

#include <stdlib.h>

#include <filesystem>

#include "engine/quant/checkpoint_quantizer.h"

namespace dq {
namespace {

namespace fs = std::filesystem;

// Removes the directory on every path out (the loaded model keeps its files mapped).
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    std::string pattern = (fs::temp_directory_path() / "dq-draft-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a temporary directory like ", pattern,
                                              " for the drafter's weights"));
    }
    return TempDir(pattern);
  }
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDir(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::StatusOr<std::unique_ptr<Model>> QuantizeBase(const Model& base,
                                                    const DraftModelOptions& options) {
  DQ_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make());
  QuantizeCheckpointOptions qo;
  qo.format = options.format;
  qo.group_size = options.group_size;
  qo.progress = false;
  qo.threads = options.threads;
  absl::Status s = QuantizeCheckpoint(base, dir.path(), qo);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("quantizing the drafter's weights to ",
                                               options.format, ": ", s.message()));
  }
  return LoadModel(dir.path());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadDraftModel(const Model& base,
                                                      const DraftModelOptions& options) {
  if (options.weights.empty() == options.format.empty()) {
    return absl::InvalidArgumentError(
        "the self drafter needs either a weight format to quantize the model to "
        "(--draft-format, e.g. int2) or a checkpoint of its own (--draft-weights), not both");
  }
  std::unique_ptr<Model> draft;
  if (!options.weights.empty()) {
    DQ_ASSIGN_OR_RETURN(draft, LoadModel(options.weights));
  } else {
    DQ_ASSIGN_OR_RETURN(draft, QuantizeBase(base, options));
  }
  DQ_RETURN_IF_ERROR(CheckSameVocabulary(base, *draft));
  return draft;
}

absl::Status CheckSameVocabulary(const Model& target, const Model& draft) {
  const int32_t n = target.tokenizer.vocab_size();
  const std::string which = draft.path.empty() ? std::string("the drafter") : draft.path;
  if (draft.tokenizer.vocab_size() != n || draft.config.vocab_size != target.config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, " has a vocabulary of ", draft.tokenizer.vocab_size(), " tokens (",
                     draft.config.vocab_size, " embedding rows) but the target has ", n, " (",
                     target.config.vocab_size, "); the drafter must share the target's tokenizer"));
  }
  for (int32_t id = 0; id < n; ++id) {
    if (draft.tokenizer.TokenBytes(id) != target.tokenizer.TokenBytes(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(which, "'s token ", id, " is '", std::string(draft.tokenizer.IdToToken(id)),
                       "' but the target's is '", std::string(target.tokenizer.IdToToken(id)),
                       "'; the drafter must share the target's tokenizer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dq
