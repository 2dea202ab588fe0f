// Statements: output, if, for (with loop.*, filters, else, break/continue), set (plain,
// namespace attribute, block), macro, call blocks and filter blocks.
#include "common/jinja/interpreter.h"

#include "absl/strings/str_cat.h"

namespace dq::jinja {

const Value* Scope::Lookup(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(const RenderOptions& opts) : opts_(opts) { AddGlobals(&globals_); }

absl::Status Interpreter::Step() {
  if (++steps_ > opts_.limits.max_steps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template exceeded ", opts_.limits.max_steps, " evaluation steps"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Str> Interpreter::Render(const StmtList& body, const Value& context) {
  context_ = context;
  out_.clear();
  out_.emplace_back();
  auto root = std::make_shared<Scope>(nullptr);
  absl::StatusOr<Flow> flow = Exec(body, root);
  for (const Value& ns : namespaces_) ns.namespace_data().items.clear();
  namespaces_.clear();
  if (!flow.ok()) return flow.status();
  return out_.back().Take();
}

absl::Status Interpreter::Emit(const Str& s) {
  out_bytes_ += s.text.size();
  if (out_bytes_ > opts_.limits.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template output exceeded ", opts_.limits.max_output_bytes, " bytes"));
  }
  out_.back().Append(s);
  return absl::OkStatus();
}

absl::StatusOr<Str> Interpreter::Capture(const StmtList& body, const ScopePtr& scope) {
  out_.emplace_back();
  absl::StatusOr<Flow> flow = Exec(body, scope);
  Str s = out_.back().Take();
  out_.pop_back();
  if (!flow.ok()) return flow.status();
  return s;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const StmtList& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    absl::StatusOr<Flow> flow = ExecStmt(*s, scope);
    if (!flow.ok()) {
      const std::string msg(flow.status().message());
      if (msg.substr(0, 9) == "template:" || s->line == 0) return flow.status();
      return absl::Status(flow.status().code(),
                          absl::StrCat("template:", s->line, ":", s->col, ": ", msg));
    }
    if (*flow != Flow::kNormal) return *flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecStmt(const Stmt& s, const ScopePtr& scope) {
  if (absl::Status st = Step(); !st.ok()) return st;
  switch (s.kind) {
    case Stmt::Kind::kData:
      if (absl::Status st = Emit(Str{s.text, {}}); !st.ok()) return st;
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      absl::StatusOr<Value> v = Eval(*s.expr, scope);
      if (!v.ok()) return v.status();
      if (absl::Status st = Emit(ToStr(*v)); !st.ok()) return st;
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        absl::StatusOr<Value> c = Eval(*cond, scope);
        if (!c.ok()) return c.status();
        if (c->Truthy()) return Exec(body, scope);
      }
      return Exec(s.else_body, scope);
    case Stmt::Kind::kBody:
      return Exec(s.body, scope);
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    default:
      break;
  }
  absl::Status st;
  switch (s.kind) {
    case Stmt::Kind::kFor:
      st = ExecFor(s, scope);
      break;
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      st = ExecSet(s, scope);
      break;
    case Stmt::Kind::kMacro:
      st = ExecMacro(s, scope);
      break;
    case Stmt::Kind::kCallBlock:
      st = ExecCallBlock(s, scope);
      break;
    case Stmt::Kind::kFilterBlock: {
      absl::StatusOr<Str> body = Capture(s.body, scope);
      if (!body.ok()) return body.status();
      const Value v = Value::String(*std::move(body));
      absl::StatusOr<Value> r = EvalFilter(*s.filter, scope, &v);
      st = r.ok() ? Emit(ToStr(*r)) : r.status();
      break;
    }
    default:
      st = absl::InternalError("unknown statement");
  }
  if (!st.ok()) return st;
  return Flow::kNormal;
}

absl::Status Interpreter::Assign(const std::vector<std::string>& targets, const Value& v,
                                 Scope& scope) {
  if (targets.size() == 1) {
    scope.Set(targets[0], v);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(v);
  if (!items.ok()) return items.status();
  if (items->size() != targets.size()) {
    return absl::InvalidArgumentError(absl::StrCat(items->size() > targets.size()
                                                       ? "too many values to unpack (expected "
                                                       : "not enough values to unpack (expected ",
                                                   targets.size(), ", got ", items->size(), ")"));
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.Set(targets[i], (*items)[i]);
  return absl::OkStatus();
}

namespace {

Value LoopObject(const std::vector<Value>& items, size_t i) {
  const int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
  std::vector<std::pair<Value, Value>> kv = {
      {Value::String("index"), Value::Int(k + 1)},
      {Value::String("index0"), Value::Int(k)},
      {Value::String("revindex"), Value::Int(n - k)},
      {Value::String("revindex0"), Value::Int(n - k - 1)},
      {Value::String("first"), Value::Bool(k == 0)},
      {Value::String("last"), Value::Bool(k == n - 1)},
      {Value::String("length"), Value::Int(n)},
      {Value::String("depth"), Value::Int(1)},
      {Value::String("depth0"), Value::Int(0)},
  };
  if (i > 0) kv.emplace_back(Value::String("previtem"), items[i - 1]);
  if (i + 1 < items.size()) kv.emplace_back(Value::String("nextitem"), items[i + 1]);
  kv.emplace_back(
      Value::String("cycle"),
      Value::Func("loop.cycle", [k](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
        if (a.positional.empty()) {
          return absl::InvalidArgumentError("no items for cycling given");
        }
        return a.positional[k % a.positional.size()];
      }));
  return Value::Dict(std::move(kv));
}

}  // namespace

absl::Status Interpreter::ExecFor(const Stmt& s, const ScopePtr& scope) {
  if (s.recursive) return absl::UnimplementedError("recursive loops are not supported");
  absl::StatusOr<Value> iter = Eval(*s.expr, scope);
  if (!iter.ok()) return iter.status();
  absl::StatusOr<std::vector<Value>> all = Iterate(*iter);
  if (!all.ok()) return all.status();
  std::vector<Value> items;
  if (s.filter) {
    for (const Value& item : *all) {
      auto fscope = std::make_shared<Scope>(scope);
      if (absl::Status st = Assign(s.targets, item, *fscope); !st.ok()) return st;
      absl::StatusOr<Value> keep = Eval(*s.filter, fscope);
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) items.push_back(item);
    }
  } else {
    items = *std::move(all);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (absl::Status st = Step(); !st.ok()) return st;
    // Each iteration gets its own scope: jinja2 does not carry assignments across iterations.
    auto body_scope = std::make_shared<Scope>(scope);
    if (absl::Status st = Assign(s.targets, items[i], *body_scope); !st.ok()) return st;
    body_scope->Set("loop", LoopObject(items, i));
    absl::StatusOr<Flow> flow = Exec(s.body, body_scope);
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  if (items.empty() && !s.else_body.empty()) {
    absl::StatusOr<Flow> flow = Exec(s.else_body, std::make_shared<Scope>(scope));
    if (!flow.ok()) return flow.status();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Stmt& s, const ScopePtr& scope) {
  Value v;
  if (s.kind == Stmt::Kind::kSetBlock) {
    absl::StatusOr<Str> body = Capture(s.body, scope);
    if (!body.ok()) return body.status();
    v = Value::String(*std::move(body));
    if (s.filter) {
      absl::StatusOr<Value> r = EvalFilter(*s.filter, scope, &v);
      if (!r.ok()) return r.status();
      v = *std::move(r);
    }
  } else {
    absl::StatusOr<Value> r = Eval(*s.expr, scope);
    if (!r.ok()) return r.status();
    v = *std::move(r);
  }
  if (s.attr.empty()) return Assign(s.targets, v, *scope);
  const Value* ns = scope->Lookup(s.targets[0]);
  if (ns == nullptr) {
    auto it = context_.is_dict() ? context_.dict().Find(s.targets[0]) : nullptr;
    ns = it;
  }
  if (ns == nullptr || !ns->is_namespace()) {
    return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
  }
  ns->namespace_data().Set(Value::String(s.attr), std::move(v));
  return absl::OkStatus();
}

Value Interpreter::MakeMacro(const Stmt& s, const ScopePtr& def_scope) {
  const Stmt* stmt = &s;  // the template outlives every render
  // Weak: the defining scope holds the macro, so a strong reference would be a cycle that
  // outlives the render. A macro called after its scope ended (stored in a namespace inside a
  // loop, say) is an error here where jinja2 would still run it.
  std::weak_ptr<Scope> weak_scope = def_scope;
  return Value::Func(
      s.name, [stmt, weak_scope](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
        ScopePtr def_scope = weak_scope.lock();
        if (!def_scope) {
          return absl::FailedPreconditionError("macro called after the scope it was defined in");
        }
        if (++in.depth_ > in.opts_.limits.max_depth) {
          --in.depth_;
          return absl::ResourceExhaustedError("macro recursion too deep");
        }
        auto scope = std::make_shared<Scope>(def_scope);
        std::vector<Value> varargs;
        for (size_t i = 0; i < args.positional.size(); ++i) {
          if (i < stmt->params.size()) {
            scope->Set(stmt->params[i].first, args.positional[i]);
          } else {
            varargs.push_back(args.positional[i]);
          }
        }
        std::vector<std::pair<Value, Value>> kwargs;
        for (auto& [k, v] : args.kwargs) {
          bool is_param = k == "caller";
          for (const auto& p : stmt->params) is_param |= p.first == k;
          if (is_param) {
            scope->Set(k, v);
          } else {
            kwargs.emplace_back(Value::String(k), v);
          }
        }
        absl::Status st;
        for (size_t i = args.positional.size(); i < stmt->params.size() && st.ok(); ++i) {
          const auto& [name, def] = stmt->params[i];
          bool given = false;
          for (auto& [k, v] : args.kwargs) given |= k == name;
          if (given) continue;
          if (!def) {
            scope->Set(name, Value::Undefined(name));
            continue;
          }
          absl::StatusOr<Value> d = in.Eval(*def, scope);
          if (d.ok()) scope->Set(name, *std::move(d));
          st = d.status();
        }
        scope->Set("varargs", Value::Tuple(std::move(varargs)));
        scope->Set("kwargs", Value::Dict(std::move(kwargs)));
        absl::StatusOr<Str> out = st.ok() ? in.Capture(stmt->body, scope) : st;
        --in.depth_;
        if (!out.ok()) return out.status();
        return Value::String(*std::move(out));
      });
}

absl::Status Interpreter::ExecMacro(const Stmt& s, const ScopePtr& scope) {
  scope->Set(s.name, MakeMacro(s, scope));
  return absl::OkStatus();
}

absl::Status Interpreter::ExecCallBlock(const Stmt& s, const ScopePtr& scope) {
  const Expr& call = *s.expr;
  absl::StatusOr<Value> fn = Eval(*call.args[0], scope);
  if (!fn.ok()) return fn.status();
  absl::StatusOr<CallArgs> args = EvalArgs(call, 1, scope);
  if (!args.ok()) return args.status();
  args->kwargs.emplace_back("caller", MakeMacro(s, scope));
  absl::StatusOr<Value> r = Call(*fn, *std::move(args));
  if (!r.ok()) return r.status();
  return Emit(ToStr(*r));
}

}  // namespace dq::jinja
