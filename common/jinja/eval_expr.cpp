// The interpreter's expression evaluation (the value operations are in eval.cpp).
#include "absl/strings/str_cat.h"
#include "common/jinja/interpreter.h"

namespace dq::jinja {

absl::StatusOr<Value> Interpreter::Eval(const Expr& e, const ScopePtr& scope) {
  if (absl::Status st = Step(); !st.ok()) return st;
  absl::StatusOr<Value> r = EvalInner(e, scope);
  if (r.ok() && r->depth() > opts_.limits.max_value_depth) {
    r = absl::ResourceExhaustedError("value nested too deeply");
  }
  if (r.ok() || e.line == 0) return r;
  const std::string msg(r.status().message());
  if (msg.substr(0, 9) == "template:") return r;
  return absl::Status(r.status().code(), absl::StrCat("template:", e.line, ":", e.col, ": ", msg));
}

std::optional<Value> Interpreter::ConstEval(const Expr& e) {
  const_mode_ = true;
  absl::StatusOr<Value> v = Eval(e, std::make_shared<Scope>(nullptr));
  const_mode_ = false;
  if (!v.ok()) return std::nullopt;
  return *std::move(v);
}

namespace {

absl::Status Impossible() { return absl::FailedPreconditionError("not a constant"); }

// Filters that take jinja2's context, which as_const cannot supply.
bool IsContextFilter(std::string_view name) {
  return name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
         name == "rejectattr";
}

}  // namespace

absl::StatusOr<Value> Interpreter::EvalName(const Expr& e, const ScopePtr& scope) {
  if (const_mode_) return Impossible();
  if (const Value* v = scope->Lookup(e.name)) return *v;
  if (context_.is_dict()) {
    if (const Value* v = context_.dict().Find(e.name)) return *v;
  }
  auto it = globals_.find(e.name);
  if (it != globals_.end()) return it->second;
  return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    absl::StatusOr<Value> v = Eval(*e.args[i], scope);
    if (!v.ok()) return v.status();
    args.positional.push_back(*std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    absl::StatusOr<Value> v = Eval(*x, scope);
    if (!v.ok()) return v.status();
    args.kwargs.emplace_back(k, *std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::Call(const Value& fn, CallArgs args) {
  if (fn.is_undefined()) return UndefinedError(fn);
  if (!fn.is_function()) {
    return absl::InvalidArgumentError(absl::StrCat("'", fn.TypeName(), "' object is not callable"));
  }
  return fn.func().fn(*this, args);
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e, const ScopePtr& scope) {
  if (const_mode_) return Impossible();
  absl::StatusOr<Value> fn = Eval(*e.args[0], scope);
  if (!fn.ok()) return fn.status();
  absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
  if (!args.ok()) return args.status();
  return Call(*fn, *std::move(args));
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e, const ScopePtr& scope,
                                              const Value* subject) {
  if (const_mode_ && (IsContextFilter(e.name) || !e.args[0])) return Impossible();
  absl::StatusOr<Value> in;
  if (!e.args[0]) {
    in = *subject;
  } else if (e.args[0]->kind == Expr::Kind::kFilter && subject != nullptr) {
    in = EvalFilter(*e.args[0], scope, subject);
  } else {
    in = Eval(*e.args[0], scope);
  }
  if (!in.ok()) return in.status();
  absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
  if (!args.ok()) return args.status();
  return ApplyFilter(e.name, *in, *std::move(args));
}

absl::StatusOr<Value> Interpreter::ApplyFilter(std::string_view name, const Value& subject,
                                               CallArgs args) {
  return RunFilter(*this, name, subject, args);
}

absl::StatusOr<bool> Interpreter::ApplyTest(std::string_view name, const Value& subject,
                                            CallArgs args) {
  return RunTest(*this, name, subject, args);
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e, const ScopePtr& scope) {
  absl::StatusOr<Value> left = Eval(*e.args[0], scope);
  if (!left.ok()) return left.status();
  for (size_t i = 0; i < e.ops.size(); ++i) {
    absl::StatusOr<Value> right = Eval(*e.args[i + 1], scope);
    if (!right.ok()) return right.status();
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==" || op == "!=") {
      r = Equal(*left, *right) == (op == "==");
    } else if (op == "in" || op == "notin") {
      absl::StatusOr<bool> c = Contains(*right, *left);
      if (!c.ok()) return c.status();
      r = *c == (op == "in");
    } else {
      if (left->is_undefined()) return UndefinedError(*left);
      if (right->is_undefined()) return UndefinedError(*right);
      absl::StatusOr<int> c = Compare(*left, *right);
      if (!c.ok()) return c.status();
      r = op == "<" ? *c < 0 : op == ">" ? *c > 0 : op == "<=" ? *c <= 0 : *c >= 0;
    }
    if (!r) return Value::Bool(false);  // a < b < c stops at the first false link
    left = std::move(right);
  }
  return Value::Bool(true);
}

// List, tuple and dict displays.
absl::StatusOr<Value> Interpreter::EvalCollection(const Expr& e, const ScopePtr& scope) {
  auto arg = [&](size_t i) { return Eval(*e.args[i], scope); };
  switch (e.kind) {
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      absl::StatusOr<CallArgs> items = EvalArgs(e, 0, scope);
      if (!items.ok()) return items.status();
      if (e.kind == Expr::Kind::kTuple) return Value::Tuple(std::move(items->positional));
      return Value::List(std::move(items->positional));
    }
    case Expr::Kind::kDict: {
      std::vector<std::pair<Value, Value>> kv;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        absl::StatusOr<Value> k = arg(i), v = arg(i + 1);
        if (!k.ok()) return k.status();
        if (!v.ok()) return v.status();
        if (!Hashable(*k)) return UnhashableError(*k);
        bool replaced = false;
        for (auto& [ek, ev] : kv) {
          if (Equal(ek, *k)) ev = *v, replaced = true;
        }
        if (!replaced) kv.emplace_back(*std::move(k), *std::move(v));
      }
      return Value::Dict(std::move(kv));
    }
    default:
      return absl::InternalError("unexpected expression");
  }
}

// x.attr, x[key] and x[a:b:c].
absl::StatusOr<Value> Interpreter::EvalAccess(const Expr& e, const ScopePtr& scope) {
  auto arg = [&](size_t i) { return Eval(*e.args[i], scope); };
  switch (e.kind) {
    case Expr::Kind::kAttr: {
      absl::StatusOr<Value> obj = arg(0);
      if (!obj.ok()) return obj.status();
      return GetAttr(*obj, e.name);
    }
    case Expr::Kind::kItem: {
      absl::StatusOr<Value> obj = arg(0), key = arg(1);
      if (!obj.ok()) return obj.status();
      if (!key.ok()) return key.status();
      return GetItem(*obj, *key);
    }
    case Expr::Kind::kSlice: {
      absl::StatusOr<Value> obj = arg(0);
      if (!obj.ok()) return obj.status();
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (!e.args[k + 1]) continue;
        absl::StatusOr<Value> p = arg(k + 1);
        if (!p.ok()) return p.status();
        parts[k] = *std::move(p);
      }
      return Slice(*obj, parts[0], parts[1], parts[2], const_mode_);
    }
    default:
      return absl::InternalError("unexpected expression");
  }
}

// Tests, unary minus/plus and ~.
absl::StatusOr<Value> Interpreter::EvalOperator(const Expr& e, const ScopePtr& scope) {
  auto arg = [&](size_t i) { return Eval(*e.args[i], scope); };
  switch (e.kind) {
    case Expr::Kind::kTest: {
      absl::StatusOr<Value> subject = arg(0);
      if (!subject.ok()) return subject.status();
      absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
      if (!args.ok()) return args.status();
      absl::StatusOr<bool> r = ApplyTest(e.name, *subject, *std::move(args));
      if (!r.ok()) return r.status();
      return Value::Bool(*r != e.negated);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      absl::StatusOr<Value> v = arg(0);
      if (!v.ok()) return v.status();
      if (v->is_undefined()) return UndefinedError(*v);
      if (!v->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ",
                                                       e.kind == Expr::Kind::kNeg ? "-" : "+",
                                                       ": '", v->TypeName(), "'"));
      }
      if (e.kind == Expr::Kind::kPos) return v->is_bool() ? Value::Int(v->as_int()) : *v;
      return v->is_float() ? Value::Float(-v->as_float()) : BinaryOp("-", Value::Int(0), *v);
    }
    case Expr::Kind::kConcat: {
      StrBuilder b;
      for (size_t i = 0; i < e.args.size(); ++i) {
        absl::StatusOr<Value> v = arg(i);
        if (!v.ok()) return v.status();
        b.Append(ToStr(*v));
      }
      return Value::String(b.Take());
    }
    default:
      return absl::InternalError("unexpected expression");
  }
}

absl::StatusOr<Value> Interpreter::EvalInner(const Expr& e, const ScopePtr& scope) {
  auto arg = [&](size_t i) { return Eval(*e.args[i], scope); };
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return EvalName(e, scope);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvalCollection(e, scope);
    case Expr::Kind::kAttr:
    case Expr::Kind::kItem:
    case Expr::Kind::kSlice:
      return EvalAccess(e, scope);
    case Expr::Kind::kTest:
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos:
    case Expr::Kind::kConcat:
      return EvalOperator(e, scope);
    case Expr::Kind::kCall:
      return EvalCall(e, scope);
    case Expr::Kind::kFilter:
      return EvalFilter(e, scope, nullptr);
    case Expr::Kind::kNot: {
      absl::StatusOr<Value> v = arg(0);
      if (!v.ok()) return v.status();
      return Value::Bool(!v->Truthy());
    }
    case Expr::Kind::kBinary: {
      absl::StatusOr<Value> a = arg(0), b = arg(1);
      if (!a.ok()) return a.status();
      if (!b.ok()) return b.status();
      return BinaryOp(e.name, *a, *b);
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e, scope);
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      absl::StatusOr<Value> a = arg(0);
      if (!a.ok()) return a.status();
      if (a->Truthy() == (e.kind == Expr::Kind::kOr)) return a;
      return arg(1);
    }
    case Expr::Kind::kCond: {
      absl::StatusOr<Value> c = arg(0);
      if (!c.ok()) return c.status();
      if (c->Truthy()) return arg(1);
      if (!e.args[2]) {
        if (const_mode_) return Impossible();  // jinja2 leaves that undefined to runtime
        return Value::Undefined("the inline if-expression evaluated to false");
      }
      return arg(2);
    }
  }
  return absl::InternalError("unknown expression");
}

}  // namespace dq::jinja
