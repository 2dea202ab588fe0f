// The recursive-descent parser's state, shared by parser.cpp (statements) and
// parser_expr.cpp (expressions). Errors are recorded in error_ (the first one wins) and the
// parse functions return null, so the grammar reads like jinja2's parser without exceptions.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/jinja/ast.h"
#include "common/jinja/lexer.h"

namespace dq::jinja::internal {

using T = Token::Type;
constexpr int kMaxNesting = 200;  // expression/statement nesting, so hostile input cannot
                                  // exhaust the stack

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}
  absl::StatusOr<StmtList> Run();

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  bool IsOp(std::string_view op) const { return cur().type == T::kOp && cur().text == op; }
  bool IsName(std::string_view n) const { return cur().type == T::kName && cur().text == n; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    ++pos_;
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!IsName(n)) return false;
    ++pos_;
    return true;
  }
  bool ok() const { return error_.ok(); }
  void Fail(const Token& at, std::string_view msg);
  bool ExpectOp(std::string_view op);
  bool ExpectBlockEnd();
  std::string ExpectName();
  ExprPtr Node(Expr::Kind kind, const Token& at);

  // Statements.
  StmtList Subparse(const std::set<std::string>& end_names);
  std::unique_ptr<Stmt> ParseStatement();
  std::unique_ptr<Stmt> ParseFor(const Token& at);
  std::unique_ptr<Stmt> ParseIf(const Token& at);
  std::unique_ptr<Stmt> ParseSet(const Token& at);
  std::unique_ptr<Stmt> ParseMacro(const Token& at, bool is_call);
  std::unique_ptr<Stmt> ParseFilterBlock(const Token& at);
  bool ParseParams(std::vector<std::pair<std::string, ExprPtr>>* params);
  bool ParseTargets(std::vector<std::string>* targets);
  // Consumes `{% endname %}` after Subparse stopped at it.
  bool EndBlock(std::string_view name);

  // Expressions, lowest precedence first.
  ExprPtr ParseTuple(bool with_condexpr);
  ExprPtr ParseExpression(bool with_condexpr = true);
  ExprPtr ParseOr();
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  ExprPtr ParseCompare();
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParsePostfix(ExprPtr node);
  ExprPtr ParseFilterExpr(ExprPtr node);
  ExprPtr ParseSubscript(ExprPtr node);
  ExprPtr ParseFilter(ExprPtr subject);
  ExprPtr ParseTest(ExprPtr subject);
  bool ParseCallArgs(Expr* call);
  std::string ParseDottedName();

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  absl::Status error_;
};

}  // namespace dq::jinja::internal
