// The tree-walking interpreter (private to the chat library). Scoping follows Jinja: a `for` body gets a new
// scope per iteration and a macro call a new scope over the scope it was defined in; `if` adds none, so `set`
// inside an `if` assigns in the enclosing loop, macro or template scope.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja_ast.h"

namespace mtp::chat::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(const std::string& name) {
    for (Scope* s = this; s; s = s->parent.get()) {
      for (auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

class Interpreter {
 public:
  explicit Interpreter(const Program& program) : program_(program), opt_(program.options) {}

  std::string render(const Json& context);

  Value eval(const Expr& e);
  Value call(const Value& fn, CallArgs& args, int line);
  Value getattr(const Value& obj, const std::string& name, int line);
  Value getitem(const Value& obj, const Value& key, int line);
  // The items a `for` loop (or a filter) visits: list items, dict keys, string characters; Undefined is
  // empty.
  std::vector<Value> iterate(const Value& v, int line);
  void step(int line) { charge(1, line); }
  // Steps for work proportional to a size (copying or visiting n items, or 64 n bytes of a string), so that a
  // loop that grows a list or string by concatenation is quadratic only up to max_steps.
  void charge(uint64_t steps, int line) {
    steps_ += steps;
    if (steps_ > opt_.max_steps)
      fail(line, str_cat("template exceeded ", opt_.max_steps, " evaluation steps"));
  }
  static constexpr uint64_t kBytesPerStep = 64;
  // Held while a statement list or an expression is evaluated: the interpreter recurses once per level.
  class Nested {
   public:
    Nested(Interpreter& in, int line) : in_(in) {
      if (++in_.eval_depth_ > in_.opt_.max_eval_depth) {
        --in_.eval_depth_;
        fail(line, str_cat("template evaluation nested deeper than ", in_.opt_.max_eval_depth));
      }
    }
    ~Nested() { --in_.eval_depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Interpreter& in_;
  };
  void append(std::string& out, std::string_view text, int line) {
    if (out.size() + text.size() > opt_.max_output_bytes) {
      fail(line, str_cat("template output exceeds ", opt_.max_output_bytes, " bytes"));
    }
    out.append(text);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec(const Body& body, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  void assign(const Stmt& s, Value v);
  Value call_macro(const Stmt& macro, const std::weak_ptr<Scope>& defined_in, CallArgs& args, int line);
  Value lookup(const std::string& name, int line);
  Value binary(const Expr& e);
  bool compare(const std::string& op, const Value& a, const Value& b, int line);

  const Program& program_;
  const JinjaOptions& opt_;
  std::shared_ptr<Scope> scope_;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  uint64_t steps_ = 0;
};

// Builtins (jinja_builtins.cpp).
Value call_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
bool call_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
// A bound method of a str, dict or list (`s.strip`), or Undefined when there is none.
Value bound_method(const Value& obj, const std::string& name);
// A global function (range, namespace, dict, raise_exception, strftime_now), or Undefined.
Value global_function(const std::string& name);
// Python's < for the types Jinja templates compare; fails on mixed types.
bool less_than(const Value& a, const Value& b, int line);
bool contains(const Value& container, const Value& item, int line);

}  // namespace mtp::chat::jinja
