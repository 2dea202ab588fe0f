// Expressions, with jinja2's precedence: conditional, or, and, not, comparisons, + -, ~,
// * / // %, **, unary - +, then filters/tests/calls and postfix access.
#include <charconv>

#include "absl/strings/str_cat.h"
#include "common/jinja/parser_internal.h"

namespace dq::jinja::internal {

ExprPtr Parser::ParseTuple(bool with_condexpr) {
  const Token& at = cur();
  ExprPtr first = ParseExpression(with_condexpr);
  if (!ok() || !IsOp(",")) return first;
  ExprPtr tuple = Node(Expr::Kind::kTuple, at);
  tuple->args.push_back(std::move(first));
  while (ok() && SkipOp(",")) {
    if (cur().type == T::kVarEnd || cur().type == T::kBlockEnd || IsOp(")") || IsName("in")) {
      break;
    }
    tuple->args.push_back(ParseExpression(with_condexpr));
  }
  return tuple;
}

ExprPtr Parser::ParseExpression(bool with_condexpr) {
  if (++depth_ > kMaxNesting) {
    Fail(cur(), "expression nested too deeply");
    return nullptr;
  }
  ExprPtr e = ParseOr();
  while (with_condexpr && ok() && IsName("if")) {
    const Token& at = cur();
    ++pos_;
    ExprPtr cond = Node(Expr::Kind::kCond, at);
    cond->args.push_back(ParseOr());
    cond->args.push_back(std::move(e));
    cond->args.push_back(SkipName("else") ? ParseExpression(true) : nullptr);
    e = std::move(cond);
  }
  --depth_;
  return ok() ? std::move(e) : nullptr;
}

ExprPtr Parser::ParseOr() {
  ExprPtr left = ParseAnd();
  while (ok() && IsName("or")) {
    ExprPtr n = Node(Expr::Kind::kOr, cur());
    ++pos_;
    n->args.push_back(std::move(left));
    n->args.push_back(ParseAnd());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::ParseAnd() {
  ExprPtr left = ParseNot();
  while (ok() && IsName("and")) {
    ExprPtr n = Node(Expr::Kind::kAnd, cur());
    ++pos_;
    n->args.push_back(std::move(left));
    n->args.push_back(ParseNot());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::ParseNot() {
  if (IsName("not")) {
    ExprPtr n = Node(Expr::Kind::kNot, cur());
    ++pos_;
    if (++depth_ > kMaxNesting) {
      Fail(cur(), "expression nested too deeply");
      return nullptr;
    }
    n->args.push_back(ParseNot());
    --depth_;
    return n;
  }
  return ParseCompare();
}

ExprPtr Parser::ParseCompare() {
  const Token& at = cur();
  ExprPtr first = ParseMath1();
  ExprPtr cmp;
  while (ok()) {
    std::string op;
    if (cur().type == T::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                 cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
      op = cur().text;
      ++pos_;
    } else if (IsName("in")) {
      op = "in";
      ++pos_;
    } else if (IsName("not") && peek().type == T::kName && peek().text == "in") {
      op = "notin";
      pos_ += 2;
    } else {
      break;
    }
    if (!cmp) {
      cmp = Node(Expr::Kind::kCompare, at);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(ParseMath1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::ParseMath1() {
  ExprPtr left = ParseConcat();
  while (ok() && (IsOp("+") || IsOp("-"))) {
    ExprPtr n = Node(Expr::Kind::kBinary, cur());
    n->name = cur().text;
    ++pos_;
    n->args.push_back(std::move(left));
    n->args.push_back(ParseConcat());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::ParseConcat() {
  const Token& at = cur();
  ExprPtr first = ParseMath2();
  if (!ok() || !IsOp("~")) return first;
  ExprPtr n = Node(Expr::Kind::kConcat, at);
  n->args.push_back(std::move(first));
  while (ok() && SkipOp("~")) n->args.push_back(ParseMath2());
  return n;
}

ExprPtr Parser::ParseMath2() {
  ExprPtr left = ParsePow();
  while (ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
    ExprPtr n = Node(Expr::Kind::kBinary, cur());
    n->name = cur().text;
    ++pos_;
    n->args.push_back(std::move(left));
    n->args.push_back(ParsePow());
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::ParsePow() {
  ExprPtr left = ParseUnary(true);
  while (ok() && IsOp("**")) {
    ExprPtr n = Node(Expr::Kind::kBinary, cur());
    n->name = "**";
    ++pos_;
    n->args.push_back(std::move(left));
    n->args.push_back(ParseUnary(true));
    left = std::move(n);
  }
  return left;
}

ExprPtr Parser::ParseUnary(bool with_filter) {
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = Node(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, cur());
    ++pos_;
    if (++depth_ > kMaxNesting) {
      Fail(cur(), "expression nested too deeply");
      return nullptr;
    }
    node->args.push_back(ParseUnary(false));
    --depth_;
  } else {
    node = ParsePostfix(ParsePrimary());
  }
  if (ok() && with_filter) node = ParseFilterExpr(std::move(node));
  return ok() ? std::move(node) : nullptr;
}

ExprPtr Parser::ParsePrimary() {
  const Token& at = cur();
  if (at.type == T::kName) {
    ++pos_;
    ExprPtr n = Node(Expr::Kind::kLiteral, at);
    if (at.text == "true" || at.text == "True") {
      n->literal = Value::Bool(true);
    } else if (at.text == "false" || at.text == "False") {
      n->literal = Value::Bool(false);
    } else if (at.text == "none" || at.text == "None") {
      n->literal = Value::None();
    } else {
      n->kind = Expr::Kind::kName;
      n->name = at.text;
    }
    return n;
  }
  if (at.type == T::kString) {
    std::string s;
    while (cur().type == T::kString) s += toks_[pos_++].text;  // adjacent literals concatenate
    ExprPtr n = Node(Expr::Kind::kLiteral, at);
    n->literal = Value::String(std::move(s));
    return n;
  }
  if (at.type == T::kInt || at.type == T::kFloat) {
    ++pos_;
    ExprPtr n = Node(Expr::Kind::kLiteral, at);
    if (at.type == T::kInt) {
      int64_t v = 0;
      auto r = std::from_chars(at.text.data(), at.text.data() + at.text.size(), v);
      if (r.ec != std::errc()) Fail(at, "integer literal out of range");
      n->literal = Value::Int(v);
    } else {
      n->literal = Value::Float(std::stod(at.text));
    }
    return n;
  }
  if (IsOp("(")) {
    ++pos_;
    if (SkipOp(")")) return Node(Expr::Kind::kTuple, at);
    ExprPtr inner = ParseTuple(true);
    return ok() && ExpectOp(")") ? std::move(inner) : nullptr;
  }
  if (IsOp("[") || IsOp("{")) {
    const bool is_list = IsOp("[");
    ++pos_;
    ExprPtr n = Node(is_list ? Expr::Kind::kList : Expr::Kind::kDict, at);
    const std::string close = is_list ? "]" : "}";
    while (ok() && !IsOp(close)) {
      if (!n->args.empty() && !ExpectOp(",")) return nullptr;
      if (IsOp(close)) break;
      n->args.push_back(ParseExpression());
      if (!is_list && ok() && ExpectOp(":")) n->args.push_back(ParseExpression());
    }
    return ok() && ExpectOp(close) ? std::move(n) : nullptr;
  }
  Fail(at, absl::StrCat("unexpected '", at.text.empty() ? "end of tag" : at.text, "'"));
  return nullptr;
}

ExprPtr Parser::ParsePostfix(ExprPtr node) {
  while (ok()) {
    if (IsOp(".")) {
      const Token& at = cur();
      ++pos_;
      if (cur().type == T::kInt) {
        ExprPtr n = Node(Expr::Kind::kItem, at);
        n->args.push_back(std::move(node));
        n->args.push_back(ParsePrimary());
        node = std::move(n);
        continue;
      }
      ExprPtr n = Node(Expr::Kind::kAttr, at);
      n->name = ExpectName();
      n->args.push_back(std::move(node));
      node = std::move(n);
    } else if (IsOp("[")) {
      node = ParseSubscript(std::move(node));
    } else if (IsOp("(")) {
      ExprPtr n = Node(Expr::Kind::kCall, cur());
      n->args.push_back(std::move(node));
      if (!ParseCallArgs(n.get())) return nullptr;
      node = std::move(n);
    } else {
      break;
    }
  }
  return node;
}

ExprPtr Parser::ParseSubscript(ExprPtr node) {
  const Token& at = cur();
  ++pos_;  // [
  ExprPtr parts[3];
  int nparts = 1;
  for (int k = 0; k < 3 && ok(); ++k) {
    if (!IsOp(":") && !IsOp("]")) parts[k] = ParseExpression();
    if (k < 2 && SkipOp(":")) {
      nparts = k + 2;
      continue;
    }
    break;
  }
  if (!ok() || !ExpectOp("]")) return nullptr;
  if (nparts == 1) {
    if (!parts[0]) {
      Fail(at, "expected an index");
      return nullptr;
    }
    ExprPtr n = Node(Expr::Kind::kItem, at);
    n->args.push_back(std::move(node));
    n->args.push_back(std::move(parts[0]));
    return n;
  }
  ExprPtr n = Node(Expr::Kind::kSlice, at);
  n->args.push_back(std::move(node));
  for (auto& p : parts) n->args.push_back(std::move(p));
  return n;
}

bool Parser::ParseCallArgs(Expr* call) {
  ++pos_;  // (
  bool first = true;
  while (ok() && !IsOp(")")) {
    if (!first && !ExpectOp(",")) return false;
    first = false;
    if (IsOp(")")) break;
    if (IsOp("*") || IsOp("**")) {
      Fail(cur(), "*args and **kwargs are not supported");
      return false;
    }
    if (cur().type == T::kName && peek().type == T::kOp && peek().text == "=") {
      std::string key = cur().text;
      pos_ += 2;
      call->kwargs.emplace_back(std::move(key), ParseExpression());
    } else {
      if (!call->kwargs.empty()) {
        Fail(cur(), "positional argument follows keyword argument");
        return false;
      }
      call->args.push_back(ParseExpression());
    }
  }
  return ok() && ExpectOp(")");
}

std::string Parser::ParseDottedName() {
  std::string name = ExpectName();
  while (ok() && IsOp(".") && peek().type == T::kName) {
    ++pos_;
    name += "." + ExpectName();
  }
  return name;
}

ExprPtr Parser::ParseFilter(ExprPtr subject) {
  ExprPtr n = Node(Expr::Kind::kFilter, cur());
  n->name = ParseDottedName();
  n->args.push_back(std::move(subject));
  if (ok() && IsOp("(") && !ParseCallArgs(n.get())) return nullptr;
  return ok() ? std::move(n) : nullptr;
}

ExprPtr Parser::ParseTest(ExprPtr subject) {
  ExprPtr n = Node(Expr::Kind::kTest, cur());
  ++pos_;  // is
  n->negated = SkipName("not");
  n->name = ParseDottedName();
  n->args.push_back(std::move(subject));
  if (!ok()) return nullptr;
  if (IsOp("(")) {
    if (!ParseCallArgs(n.get())) return nullptr;
  } else {
    const T t = cur().type;
    const bool arg_follows = t == T::kName || t == T::kString || t == T::kInt || t == T::kFloat ||
                             IsOp("(") || IsOp("[") || IsOp("{");
    if (arg_follows && !IsName("else") && !IsName("or") && !IsName("and")) {
      n->args.push_back(ParsePostfix(ParsePrimary()));
    }
  }
  return ok() ? std::move(n) : nullptr;
}

ExprPtr Parser::ParseFilterExpr(ExprPtr node) {
  while (ok()) {
    if (IsOp("|")) {
      ++pos_;
      node = ParseFilter(std::move(node));
    } else if (IsName("is")) {
      node = ParseTest(std::move(node));
    } else if (IsOp("(")) {
      ExprPtr n = Node(Expr::Kind::kCall, cur());
      n->args.push_back(std::move(node));
      if (!ParseCallArgs(n.get())) return nullptr;
      node = std::move(n);
    } else {
      break;
    }
  }
  return node;
}

}  // namespace dq::jinja::internal
