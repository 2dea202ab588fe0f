#include "common/jinja/parser.h"

#include <charconv>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/jinja/parser_internal.h"

namespace dq::jinja::internal {

void Parser::Fail(const Token& at, std::string_view msg) {
  if (error_.ok()) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("template:", at.line, ":", at.col, ": ", std::string(msg)));
  }
}

bool Parser::ExpectOp(std::string_view op) {
  if (SkipOp(op)) return true;
  Fail(cur(),
       absl::StrCat("expected '", std::string(std::string(op)), "', got '", cur().text, "'"));
  return false;
}

bool Parser::ExpectBlockEnd() {
  if (cur().type == T::kBlockEnd) {
    ++pos_;
    return true;
  }
  Fail(cur(), absl::StrCat("expected end of statement block, got '", cur().text, "'"));
  return false;
}

std::string Parser::ExpectName() {
  if (cur().type != T::kName) {
    Fail(cur(), absl::StrCat("expected a name, got '", cur().text, "'"));
    return "";
  }
  return toks_[pos_++].text;
}

ExprPtr Parser::Node(Expr::Kind kind, const Token& at) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = at.line;
  e->col = at.col;
  return e;
}

absl::StatusOr<StmtList> Parser::Run() {
  StmtList body = Subparse({});
  if (ok() && cur().type != T::kEof) Fail(cur(), absl::StrCat("unexpected '", cur().text, "'"));
  if (!ok()) return error_;
  return body;
}

StmtList Parser::Subparse(const std::set<std::string>& end_names) {
  StmtList body;
  if (++depth_ > kMaxNesting) Fail(cur(), "statements nested too deeply");
  while (ok() && cur().type != T::kEof) {
    const Token& at = cur();
    if (at.type == T::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kData;
      s->text = at.text;
      body.push_back(std::move(s));
      ++pos_;
    } else if (at.type == T::kVarBegin) {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = at.line, s->col = at.col;
      s->expr = ParseTuple(true);
      if (!ok()) break;
      if (cur().type != T::kVarEnd) {
        Fail(cur(), absl::StrCat("expected end of print statement, got '", cur().text, "'"));
        break;
      }
      ++pos_;
      body.push_back(std::move(s));
    } else if (at.type == T::kBlockBegin) {
      if (peek().type == T::kName && end_names.count(peek().text)) break;
      ++pos_;
      auto s = ParseStatement();
      if (s) body.push_back(std::move(s));
    } else {
      Fail(at, "unexpected token");
    }
  }
  if (ok() && !end_names.empty() && cur().type == T::kEof) {
    Fail(cur(), absl::StrCat("unexpected end of template, expected '", *end_names.begin(), "'"));
  }
  --depth_;
  return body;
}

bool Parser::EndBlock(std::string_view name) {
  if (!ok()) return false;
  ++pos_;  // the block begin
  if (!SkipName(name)) {
    Fail(cur(), absl::StrCat("expected '", std::string(std::string(name)), "'"));
    return false;
  }
  return ExpectBlockEnd();
}

std::unique_ptr<Stmt> Parser::ParseStatement() {
  const Token& at = cur();
  if (at.type != T::kName) {
    Fail(at, "tag name expected");
    return nullptr;
  }
  const std::string name = at.text;
  ++pos_;
  if (name == "for") return ParseFor(at);
  if (name == "if") return ParseIf(at);
  if (name == "set") return ParseSet(at);
  if (name == "macro") return ParseMacro(at, false);
  if (name == "call") return ParseMacro(at, true);
  if (name == "filter") return ParseFilterBlock(at);
  if (name == "break" || name == "continue") {
    auto s = std::make_unique<Stmt>();
    s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    s->line = at.line, s->col = at.col;
    return ExpectBlockEnd() ? std::move(s) : nullptr;
  }
  if (name == "generation") {  // transformers' AssistantTracker extension: renders its body
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kBody;
    if (!ExpectBlockEnd()) return nullptr;
    s->body = Subparse({"endgeneration"});
    return EndBlock("endgeneration") ? std::move(s) : nullptr;
  }
  Fail(at, absl::StrCat("Encountered unknown tag '", std::string(std::string(name)), "'."));
  return nullptr;
}

bool Parser::ParseTargets(std::vector<std::string>* targets) {
  const bool paren = SkipOp("(");
  do {
    if (!paren && IsName("in")) break;
    targets->push_back(ExpectName());
    if (!ok()) return false;
  } while (SkipOp(","));
  if (paren && !ExpectOp(")")) return false;
  return true;
}

std::unique_ptr<Stmt> Parser::ParseFor(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kFor;
  s->line = at.line, s->col = at.col;
  if (!ParseTargets(&s->targets)) return nullptr;
  if (!SkipName("in")) {
    Fail(cur(), "expected 'in'");
    return nullptr;
  }
  s->expr = ParseTuple(false);
  if (SkipName("if")) s->filter = ParseExpression();
  if (SkipName("recursive")) s->recursive = true;
  if (!ok() || !ExpectBlockEnd()) return nullptr;
  s->body = Subparse({"endfor", "else"});
  if (ok() && peek().text == "else") {
    pos_ += 2;
    if (!ExpectBlockEnd()) return nullptr;
    s->else_body = Subparse({"endfor"});
  }
  return EndBlock("endfor") ? std::move(s) : nullptr;
}

std::unique_ptr<Stmt> Parser::ParseIf(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kIf;
  s->line = at.line, s->col = at.col;
  while (true) {
    ExprPtr cond = ParseTuple(true);
    if (!ok() || !ExpectBlockEnd()) return nullptr;
    StmtList body = Subparse({"elif", "else", "endif"});
    if (!ok()) return nullptr;
    s->branches.emplace_back(std::move(cond), std::move(body));
    const std::string next = peek().text;
    pos_ += 2;
    if (next == "elif") continue;
    if (next == "else") {
      if (!ExpectBlockEnd()) return nullptr;
      s->else_body = Subparse({"endif"});
      return EndBlock("endif") ? std::move(s) : nullptr;
    }
    return ExpectBlockEnd() ? std::move(s) : nullptr;  // endif
  }
}

std::unique_ptr<Stmt> Parser::ParseSet(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->line = at.line, s->col = at.col;
  s->targets.push_back(ExpectName());
  if (SkipOp(".")) {
    s->attr = ExpectName();
  } else {
    while (ok() && SkipOp(",")) s->targets.push_back(ExpectName());
  }
  if (!ok()) return nullptr;
  if (SkipOp("=")) {
    s->kind = Stmt::Kind::kSet;
    s->expr = ParseTuple(true);
    return ok() && ExpectBlockEnd() ? std::move(s) : nullptr;
  }
  s->kind = Stmt::Kind::kSetBlock;
  if (s->targets.size() != 1 || !s->attr.empty()) {
    Fail(at, "a block set takes a single name");
    return nullptr;
  }
  if (IsOp("|")) s->filter = ParseFilterExpr(nullptr);
  if (!ok() || !ExpectBlockEnd()) return nullptr;
  s->body = Subparse({"endset"});
  return EndBlock("endset") ? std::move(s) : nullptr;
}

bool Parser::ParseParams(std::vector<std::pair<std::string, ExprPtr>>* params) {
  if (!ExpectOp("(")) return false;
  while (ok() && !IsOp(")")) {
    if (!params->empty() && !ExpectOp(",")) return false;
    if (IsOp(")")) break;  // trailing comma
    std::string name = ExpectName();
    ExprPtr def;
    if (SkipOp("=")) def = ParseExpression();
    params->emplace_back(std::move(name), std::move(def));
  }
  return ok() && ExpectOp(")");
}

std::unique_ptr<Stmt> Parser::ParseMacro(const Token& at, bool is_call) {
  auto s = std::make_unique<Stmt>();
  s->kind = is_call ? Stmt::Kind::kCallBlock : Stmt::Kind::kMacro;
  s->line = at.line, s->col = at.col;
  if (is_call) {
    if (IsOp("(") && !ParseParams(&s->params)) return nullptr;
    s->expr = ParseExpression();
    if (ok() && s->expr->kind != Expr::Kind::kCall) Fail(at, "expected call");
  } else {
    s->name = ExpectName();
    if (!ok() || !ParseParams(&s->params)) return nullptr;
  }
  if (!ok() || !ExpectBlockEnd()) return nullptr;
  const std::string end = is_call ? "endcall" : "endmacro";
  s->body = Subparse({end});
  return EndBlock(end) ? std::move(s) : nullptr;
}

std::unique_ptr<Stmt> Parser::ParseFilterBlock(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kFilterBlock;
  s->line = at.line, s->col = at.col;
  s->filter = ParseFilter(nullptr);
  if (ok() && IsOp("|")) s->filter = ParseFilterExpr(std::move(s->filter));
  if (!ok() || !ExpectBlockEnd()) return nullptr;
  s->body = Subparse({"endfilter"});
  return EndBlock("endfilter") ? std::move(s) : nullptr;
}

}  // namespace dq::jinja::internal

namespace dq::jinja {

absl::StatusOr<StmtList> ParseTemplate(std::string_view source, const LexOptions& opts) {
  absl::StatusOr<std::vector<Token>> toks = Tokenize(source, opts);
  if (!toks.ok()) return toks.status();
  internal::Parser parser(*std::move(toks));
  return parser.Run();
}

}  // namespace dq::jinja
