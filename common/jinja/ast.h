// The syntax tree of a parsed template: expressions and statements, as jinja2's parser builds
// them for the constructs chat templates use.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/jinja/value.h"

namespace dq::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args: elements
    kTuple,    // args: elements (a tuple behaves as a list here)
    kDict,     // args: key, value, key, value, ...
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], null parts omitted
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs); args[0] is null in a filter block
    kTest,     // args[0] is [not] name(args[1:], kwargs)
    kNeg,
    kPos,
    kNot,
    kBinary,   // args[0] name args[1]: + - * / // % **
    kConcat,   // args joined by ~
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    kAnd,
    kOr,
    kCond,  // args[1] if args[0] else args[2] (null: undefined)
  };
  Kind kind;
  int line = 0, col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kData,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches, else_body
    kFor,          // for targets in expr [if filter] body [else else_body]
    kSet,          // set targets = expr, or set targets[0].attr = expr
    kSetBlock,     // set targets[0] [| filter] body endset
    kMacro,        // macro name(params) body
    kCallBlock,    // call(params) expr body
    kFilterBlock,  // filter filter body
    kBreak,
    kContinue,
    kBody,  // just body (transformers' {% generation %})
  };
  Kind kind;
  int line = 0, col = 0;
  std::string text;
  std::string name;
  std::string attr;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  bool recursive = false;
};

}  // namespace dq::jinja
