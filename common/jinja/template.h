// A Jinja2 chat template: parsed once, rendered many times, byte-identical to Python's jinja2
// in the environment Hugging Face transformers uses for apply_chat_template
// (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols; tojson with
// ensure_ascii=False; raise_exception and strftime_now as globals).
//
//   absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(source);
//   absl::StatusOr<std::string> prompt = t->Render(context);  // context: a dict Value
//
// Errors (syntax, undefined operations, raise_exception, limits) are absl::Status with
// "template:LINE:COL: " in front of the message.
//
// Known differences from jinja2 (none seen in the corpus of real chat templates):
// - integers are 64-bit (Python's are unbounded): overflow is an error;
// - map/select/reject/unique/batch/reverse return lists, not generators, so printing one shows
//   its items where jinja2 prints "<generator object ...>", and |length works on it;
// - case mapping covers Latin, Greek, Cyrillic and fullwidth letters, not all of Unicode;
//   repr() escapes the controls and the Unicode spaces, not every non-printable code point;
// - not supported: recursive loops, include/extends/import/with, str.format(), most Markup
//   behaviour beyond |e, |safe and +; a macro called after its defining scope ended (stored in
//   a namespace inside a loop) is an error.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/jinja/ast.h"
#include "common/jinja/interpreter.h"
#include "common/jinja/value.h"

namespace dq::jinja {

class JinjaTemplate {
 public:
  static absl::StatusOr<JinjaTemplate> Parse(std::string_view source);

  absl::StatusOr<std::string> Render(const Value& context, const RenderOptions& opts = {}) const;
  // The rendered text with the byte ranges that came from user strings (Value::UserString and
  // FromJson(..., true)), for Tokenizer::EncodeSpecialOutside.
  absl::StatusOr<Str> RenderWithProvenance(const Value& context,
                                           const RenderOptions& opts = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const StmtList> body) : body_(std::move(body)) {}
  std::shared_ptr<const StmtList> body_;  // shared: copies of a template are cheap
};

}  // namespace dq::jinja
