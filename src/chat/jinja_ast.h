// The parsed form of a template (private to the chat library): expressions and statements, each with the
// line it came from so that runtime errors can name it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja_value.h"

namespace mtp::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kLiteral,  // value
    kName,     // name
    kList,     // items
    kTuple,    // items
    kDict,     // items: key0, value0, key1, value1, ...
    kGetattr,  // a.name
    kGetitem,  // a[b]
    kSlice,    // a[items[0]:items[1]:items[2]], missing parts are null
    kCall,     // a(items..., kwargs...)
    kFilter,   // a | name(items..., kwargs...)
    kTest,     // a is [not] name(items...)
    kUnary,    // op a: "-", "+", "not"
    kBinary,   // a op b: + - * / // % ** ~ and or
    kCompare,  // a ops[0] items[0] ops[1] items[1] ...: == != < > <= >= in "not in"
    kCond,     // b if a else c (c may be null)
  };
  Type type;
  int line = 0;
  Value value;
  std::string name;  // name, attribute, filter, test, or operator
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  // Levels of expressions from this node down, set by the parser as it builds the node (Parser::sealed); the
  // interpreter and the destructor recurse this deep, so the parser refuses more than max_nesting.
  int height = 1;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none
};

struct Stmt {
  enum class Type {
    kText,      // text
    kPrint,     // {{ expr }}
    kIf,        // conds[k] -> bodies[k]; else_body
    kFor,       // for targets in expr [if cond]: body; else_body
    kSet,       // set targets = expr, or set target.attr = expr (attr non-empty)
    kSetBlock,  // set target %} body {% endset, filters applied via expr (a kFilter chain over a null)
    kMacro,     // macro name(params): body
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %}: renders its body unchanged
  };
  Type type;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
};

struct Program {
  Body body;
  JinjaOptions options;
};

// Lexes and parses; throws Error.
std::unique_ptr<Program> parse_program(std::string_view source, const JinjaOptions& options);

// Whether a filter or test of this name exists (the parser rejects unknown ones, as Jinja does).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace mtp::chat::jinja
