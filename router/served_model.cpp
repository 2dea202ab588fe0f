#include "router/served_model.h"

#include <filesystem>

#include "engine/model/model_loader.h"

namespace dq::router {

std::string ModelNameFromPath(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // a trailing slash
  return p.has_extension() && p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

absl::StatusOr<ServedModel> ServedModel::Load(const std::string& path, std::string name) {
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(path));
  ServedModel m;
  m.name = name.empty() ? ModelNameFromPath(path) : std::move(name);
  m.path = path;
  m.tokenizer = model->tokenizer;
  m.chat_template = model->chat_template;
  m.max_context = model->config.max_context;
  m.vocab_size = model->config.vocab_size;
  if (m.max_context <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", path, " declares no context length (max_position_embeddings)"));
  }
  m.SetToolCallFormat(m.chat_template ? DetectToolCallFormat(m.chat_template->source())
                                      : std::nullopt);
  return m;
}

void ServedModel::SetToolCallFormat(std::optional<ToolCallFormat> format) {
  tool_call_format = format;
  tool_marker_ids.clear();
  if (!format) return;
  for (const std::string& marker : ToolCallMarkers(*format)) {
    const std::optional<int32_t> id = tokenizer.TokenToId(marker);
    // A marker that is not one special token is ordinary text, which the detokenizer keeps.
    if (id && tokenizer.IsSpecial(*id)) tool_marker_ids.push_back(*id);
  }
}

ApiResult<std::vector<int32_t>> ServedModel::ChatPrompt(const std::vector<ChatMessage>& messages,
                                                        const ChatRenderOptions& opts) const {
  if (!chat_template) {
    return InvalidRequest(
        "messages",
        absl::StrCat("The model '", name, "' has no chat template; use /v1/completions instead."));
  }
  absl::StatusOr<RenderedChat> prompt = chat_template->Render(messages, opts);
  if (!prompt.ok()) return InvalidRequest("messages", std::string(prompt.status().message()));
  if (parse_special_in_content) return tokenizer.Encode(prompt->text, /*parse_special=*/true);
  return tokenizer.EncodeSpecialOutside(prompt->text, prompt->content);
}

ChatRenderOptions ChatRenderOptionsFor(const ChatCompletionRequest& request,
                                       bool add_generation_prompt) {
  ChatRenderOptions opts;
  opts.add_generation_prompt = add_generation_prompt;
  opts.enable_thinking = request.enable_thinking;
  if (request.tool_choice != ToolChoice::kNone) opts.tools = request.tools;
  opts.kwargs = request.template_kwargs;
  return opts;
}

std::vector<int32_t> ServedModel::CompletionPrompt(const CompletionRequest& request) const {
  if (request.prompt_is_token_ids()) return std::get<1>(request.prompt);
  return tokenizer.Encode(std::get<0>(request.prompt), /*parse_special=*/true);
}

std::string ServedModel::PromptText(const CompletionRequest& request) const {
  if (!request.prompt_is_token_ids()) return std::get<0>(request.prompt);
  return tokenizer.Decode(std::get<1>(request.prompt));
}

}  // namespace dq::router
