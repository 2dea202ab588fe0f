// Executes a parsed template: scopes, statements, expressions, filters, tests and the globals
// that transformers' environment provides. One Interpreter renders one template once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/jinja/ast.h"
#include "common/jinja/value.h"

namespace dq::jinja {

// Bounds against hostile templates and inputs (templates come from model files).
struct RenderLimits {
  size_t max_output_bytes = 64 << 20;
  uint64_t max_steps = 20'000'000;  // statements, expressions and loop iterations
  int max_depth = 100;              // macro and caller nesting
  uint32_t max_value_depth = 256;   // lists and dicts nested in one value
};

struct RenderOptions {
  RenderLimits limits;
  // transformers' strftime_now(format): the current local time. Injectable so tests are
  // deterministic; unset means the real clock.
  std::function<std::string(std::string_view format)> strftime_now;
};

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* Lookup(const std::string& name) const;
  void Set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  std::shared_ptr<Scope> parent_;
  std::map<std::string, Value, std::less<>> vars_;
};

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& opts);

  // Renders `body` with `context` (a dict: the template's variables).
  absl::StatusOr<Str> Render(const StmtList& body, const Value& context);

  // For builtins, filters and methods that call back into the template.
  absl::StatusOr<Value> Call(const Value& fn, CallArgs args);
  absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, CallArgs args);
  absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, CallArgs args);
  absl::Status Step();
  // Namespaces are mutable and may come to hold themselves; the render empties every one it
  // made when it ends, so no reference cycle outlives it.
  void KeepNamespace(const Value& ns) { namespaces_.push_back(ns); }
  // jinja2's compile-time evaluation (Node.as_const): the value of `e` if it uses no variables,
  // calls or context filters and evaluates without error; slices then go through getitem.
  std::optional<Value> ConstEval(const Expr& e);
  const RenderOptions& options() const { return opts_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using ScopePtr = std::shared_ptr<Scope>;

  absl::StatusOr<Flow> Exec(const StmtList& body, const ScopePtr& scope);
  absl::StatusOr<Flow> ExecStmt(const Stmt& s, const ScopePtr& scope);
  absl::Status ExecFor(const Stmt& s, const ScopePtr& scope);
  absl::Status ExecSet(const Stmt& s, const ScopePtr& scope);
  absl::Status ExecMacro(const Stmt& s, const ScopePtr& scope);
  absl::Status ExecCallBlock(const Stmt& s, const ScopePtr& scope);
  // Renders `body` into a fresh buffer and returns what it wrote.
  absl::StatusOr<Str> Capture(const StmtList& body, const ScopePtr& scope);
  absl::Status Emit(const Str& s);
  absl::Status Assign(const std::vector<std::string>& targets, const Value& v, Scope& scope);
  Value MakeMacro(const Stmt& s, const ScopePtr& scope);

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCollection(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalAccess(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalOperator(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalName(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCompare(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCall(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalFilter(const Expr& e, const ScopePtr& scope, const Value* subject);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope);

  RenderOptions opts_;
  Value context_;
  std::map<std::string, Value, std::less<>> globals_;
  std::vector<StrBuilder> out_;  // the innermost capture is back()
  size_t out_bytes_ = 0;
  uint64_t steps_ = 0;
  int depth_ = 0;
  bool const_mode_ = false;  // inside ConstEval
  std::vector<Value> namespaces_;
};

// Binds `args` to the parameter `names` like a Python signature; a parameter not given is
// nullopt. Errors on too many positional args or an unknown keyword.
absl::StatusOr<std::vector<std::optional<Value>>> BindArgs(
    std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> names);

// Value operations shared by expressions and filters (eval.cpp).
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// `folded`: jinja2's compile-time evaluation of a constant {{ }} (see Slice in eval.cpp).
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step, bool folded = false);
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// Python iteration: list items, dict keys, string characters; undefined is empty.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
absl::StatusOr<int64_t> Length(const Value& v);
absl::Status UndefinedError(const Value& v);

// Bound methods of str, dict and list values (methods.cpp); nullopt when there is none.
std::optional<Value> GetMethod(const Value& obj, std::string_view name);
// The globals transformers' environment defines: range, dict, namespace, raise_exception,
// strftime_now, cycler, joiner.
void AddGlobals(std::map<std::string, Value, std::less<>>* globals);

// Filters (filters.cpp) and tests (tests.cpp), by name.
absl::StatusOr<Value> RunFilter(Interpreter& in, std::string_view name, const Value& v,
                                CallArgs& args);
absl::StatusOr<bool> RunTest(Interpreter& in, std::string_view name, const Value& v,
                             CallArgs& args);

// tojson with transformers' options (json.cpp).
absl::StatusOr<Str> ToJson(const Value& v, const Value& indent, const Value& separators,
                           bool sort_keys);

}  // namespace dq::jinja
