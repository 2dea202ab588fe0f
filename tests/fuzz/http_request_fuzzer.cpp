// libFuzzer target for what the router does with an untrusted request body before any worker
// sees it: JSON parsing with its depth limit, the OpenAI field checks of /v1/chat/completions
// and /v1/completions, and for a chat the template rendering and the tokenization that keeps
// special tokens out of message content. Built and run by tests/fuzz/run.sh (clang, ASan +
// UBSan); a crash, a sanitizer report or a broken invariant below stops it with the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "common/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "router/openai_request.h"

namespace {

const dq::Tokenizer& TheTokenizer() {
  static const dq::Tokenizer* tok = [] {
    const char* path = std::getenv("DQ_FUZZ_TOKENIZER");
    auto t = dq::Tokenizer::FromHfJson(path != nullptr ? path : "tokenizer.json");
    if (!t.ok()) std::abort();
    return new dq::Tokenizer(*std::move(t));
  }();
  return *tok;
}

// Qwen3's template (tools, tool calls, reasoning): DQ_FUZZ_TEMPLATE or the golden copy.
const dq::ChatTemplate& TheTemplate() {
  static const dq::ChatTemplate* t = [] {
    const char* path = std::getenv("DQ_FUZZ_TEMPLATE");
    std::ifstream f(path != nullptr ? path : "tests/golden/chat/qwen3_template.jinja");
    if (!f) std::abort();
    const std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto parsed = dq::ChatTemplate::Parse(source, {"", "<|im_end|>"});
    if (!parsed.ok()) std::abort();
    return new dq::ChatTemplate(*std::move(parsed));
  }();
  return *t;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

void RenderAndTokenize(const dq::router::ChatCompletionRequest& chat) {
  dq::ChatRenderOptions opts;
  opts.tools = chat.tools;
  opts.kwargs = chat.template_kwargs;
  opts.enable_thinking = chat.enable_thinking;
  auto rendered = TheTemplate().Render(chat.messages, opts);
  if (!rendered.ok()) return;
  size_t last = 0;
  for (const dq::TextRange& r : rendered->content) {
    Check(r.begin >= last && r.begin < r.end && r.end <= rendered->text.size());
    last = r.end;
  }
  const std::vector<int32_t> ids =
      TheTokenizer().EncodeSpecialOutside(rendered->text, rendered->content);
  for (int32_t id : ids) Check(id >= 0 && id < TheTokenizer().vocab_size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  dq::router::ParseOptions options;
  options.served_models = {"tiny"};
  options.vocab_size = TheTokenizer().vocab_size();
  auto chat = dq::router::ParseChatCompletionRequest(body, options);
  if (chat.ok()) {
    RenderAndTokenize(*chat);
  } else {
    Check(chat.error().http_status >= 400 && chat.error().http_status < 500);
    Check(!chat.error().message.empty());
  }
  auto completion = dq::router::ParseCompletionRequest(body, options);
  if (!completion.ok()) Check(completion.error().http_status >= 400);
  return 0;
}
