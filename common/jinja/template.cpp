#include "common/jinja/template.h"

#include "common/jinja/optimizer.h"
#include "common/jinja/parser.h"

namespace dq::jinja {

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(std::string_view source) {
  absl::StatusOr<StmtList> body = ParseTemplate(source, LexOptions{});
  if (!body.ok()) return body.status();
  FoldConstants(&*body);
  return JinjaTemplate(std::make_shared<const StmtList>(*std::move(body)));
}

absl::StatusOr<Str> JinjaTemplate::RenderWithProvenance(const Value& context,
                                                        const RenderOptions& opts) const {
  if (!context.is_dict()) return absl::InvalidArgumentError("template context must be a dict");
  Interpreter in(opts);
  return in.Render(*body_, context);
}

absl::StatusOr<std::string> JinjaTemplate::Render(const Value& context,
                                                  const RenderOptions& opts) const {
  absl::StatusOr<Str> s = RenderWithProvenance(context, opts);
  if (!s.ok()) return s.status();
  return std::move(s->text);
}

}  // namespace dq::jinja
