#include "common/jinja/optimizer.h"

#include "common/jinja/interpreter.h"

namespace dq::jinja {
namespace {

// jinja2's has_safe_repr: what a folded constant may be.
bool SafeRepr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kString:
      return true;
    case Value::Kind::kList:
      for (const Value& x : v.list()) {
        if (!SafeRepr(x)) return false;
      }
      return true;
    case Value::Kind::kDict:
      for (const auto& [k, x] : v.dict().items) {
        if (!SafeRepr(k) || !SafeRepr(x)) return false;
      }
      return true;
    default:
      return false;
  }
}

class Folder {
 public:
  void Body(StmtList& body) {
    for (auto& s : body) Statement(*s);
  }

 private:
  void Expression(ExprPtr& e) {
    if (!e || e->kind == Expr::Kind::kLiteral) return;
    for (auto& a : e->args) Expression(a);
    for (auto& [k, a] : e->kwargs) Expression(a);
    std::optional<Value> v = in_.ConstEval(*e);
    if (!v || !SafeRepr(*v)) return;
    auto lit = std::make_unique<Expr>();
    lit->kind = Expr::Kind::kLiteral;
    lit->line = e->line, lit->col = e->col;
    lit->literal = *std::move(v);
    e = std::move(lit);
  }

  // A filter chain applied to a block's output: its innermost subject is the block.
  void FilterChain(ExprPtr& e) {
    if (!e) return;
    if (e->kind == Expr::Kind::kFilter && !e->args.empty()) {
      FilterChain(e->args[0]);
      for (size_t i = 1; i < e->args.size(); ++i) Expression(e->args[i]);
      for (auto& [k, a] : e->kwargs) Expression(a);
    }
  }

  void Statement(Stmt& s) {
    if (s.kind == Stmt::Kind::kFilterBlock || s.kind == Stmt::Kind::kSetBlock) {
      FilterChain(s.filter);
    } else {
      Expression(s.filter);
    }
    Expression(s.expr);
    for (auto& [cond, body] : s.branches) {
      Expression(cond);
      Body(body);
    }
    for (auto& [name, def] : s.params) Expression(def);
    Body(s.body);
    Body(s.else_body);
    if (s.kind == Stmt::Kind::kOutput) {
      // A constant {{ }} is rendered now, whatever its value (undefined prints nothing).
      if (std::optional<Value> v = in_.ConstEval(*s.expr)) {
        s.kind = Stmt::Kind::kData;
        s.text = ToStr(*v).text;
        s.expr.reset();
      }
    }
  }

  Interpreter in_{RenderOptions{}};
};

}  // namespace

void FoldConstants(StmtList* body) { Folder().Body(*body); }

}  // namespace dq::jinja
