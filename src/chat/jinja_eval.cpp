// Evaluation of expressions and statements, and the JinjaTemplate entry points.
#include <cmath>

#include "jinja_interp.h"

namespace mtp::chat {

using jinja::Error;

Expected<JinjaTemplate> JinjaTemplate::parse(std::string_view source, JinjaOptions options) {
  try {
    JinjaTemplate t;
    t.program_ = jinja::parse_program(source, options);
    return t;
  } catch (const Error& e) {
    return invalid_argument("chat template line ", e.line, ": ", e.message);
  }
}

Expected<std::string> JinjaTemplate::render(const Json& context) const {
  if (!program_) return Status(StatusCode::kInternal, "render on an empty JinjaTemplate");
  if (!context.is_object()) return invalid_argument("template context must be a JSON object");
  try {
    jinja::Interpreter interp(*program_);
    return interp.render(context);
  } catch (const Error& e) {
    std::string where = e.line > 0 ? str_cat("chat template line ", e.line, ": ") : "chat template: ";
    return invalid_argument(where, e.raised ? "template raised: " : "", e.message);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "chat template: out of memory while rendering");
  }
}

}  // namespace mtp::chat

namespace mtp::chat::jinja {

std::string Interpreter::render(const Json& context) {
  scope_ = std::make_shared<Scope>();
  for (const auto& [k, v] : context.items()) scope_->set(k, from_json(v, opt_.max_nesting));
  std::string out;
  exec(program_.body, out);
  return out;
}

Value Interpreter::lookup(const std::string& name, int line) {
  if (Value* v = scope_->find(name)) return *v;
  Value g = global_function(name);
  if (!g.is_undefined()) return g;
  return Value::undefined(str_cat("'", name, "' is undefined"));
}

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
  const Nested guard(*this, body.empty() ? 0 : body.front()->line);
  for (const StmtPtr& sp : body) {
    const Stmt& s = *sp;
    step(s.line);
    switch (s.type) {
      case Stmt::Type::kText:
        append(out, s.text, s.line);
        break;
      case Stmt::Type::kPrint: {
        Value v = eval(*s.expr);
        if (v.is_string()) {
          append(out, v.s, s.line);
        } else {
          append(out, to_str(v), s.line);
        }
        break;
      }
      case Stmt::Type::kIf: {
        const Body* chosen = &s.else_body;
        for (size_t k = 0; k < s.conds.size(); ++k) {
          if (truthy(eval(*s.conds[k]))) {
            chosen = &s.bodies[k];
            break;
          }
        }
        Flow f = exec(*chosen, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case Stmt::Type::kFor:
        exec_for(s, out);
        break;
      case Stmt::Type::kSet:
        assign(s, eval(*s.expr));
        break;
      case Stmt::Type::kSetBlock: {
        std::string captured;
        exec(s.body, captured);
        Value v = Value::string(std::move(captured));
        if (s.expr) {
          // The filter chain was parsed over a null input: apply it innermost first.
          std::vector<const Expr*> chain;
          for (const Expr* f = s.expr.get(); f; f = f->a.get()) chain.push_back(f);
          for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            CallArgs args;
            args.line = (*it)->line;
            for (const auto& a : (*it)->items) args.args.push_back(eval(*a));
            for (const auto& [k, a] : (*it)->kwargs) args.kwargs.emplace_back(k, eval(*a));
            v = call_filter(*this, (*it)->name, v, args);
          }
        }
        assign(s, std::move(v));
        break;
      }
      case Stmt::Type::kMacro: {
        const Stmt* macro = &s;
        std::weak_ptr<Scope> defined_in = scope_;
        scope_->set(s.text, Value::callable(s.text, [macro, defined_in](Interpreter& in, CallArgs& a) {
                      return in.call_macro(*macro, defined_in, a, a.line);
                    }));
        break;
      }
      case Stmt::Type::kBreak:
        return Flow::kBreak;
      case Stmt::Type::kContinue:
        return Flow::kContinue;
      case Stmt::Type::kGeneration: {
        Flow f = exec(s.body, out);
        if (f != Flow::kNormal) return f;
        break;
      }
    }
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Stmt& s, Value v) {
  if (!s.attr.empty()) {
    Value* ns = scope_->find(s.targets[0]);
    if (!ns || !ns->is_namespace) {
      fail(s.line,
           str_cat("cannot assign attribute '", s.attr, "' on '", s.targets[0], "': not a namespace()"));
    }
    if (v.holds_namespace) {
      fail(s.line, str_cat("cannot assign a namespace (or a value holding one) to attribute '", s.attr,
                           "' of a namespace"));
    }
    ns->contain(v);
    ns->dict->set(s.attr, std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope_->set(s.targets[0], std::move(v));
    return;
  }
  std::vector<Value> items = iterate(v, s.line);
  if (items.size() != s.targets.size()) {
    fail(s.line, str_cat("cannot unpack ", items.size(), " values into ", s.targets.size(), " names"));
  }
  for (size_t k = 0; k < items.size(); ++k) scope_->set(s.targets[k], std::move(items[k]));
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, std::string& out) {
  Value seq = eval(*s.expr);
  if (!seq.is_undefined() && !seq.is_list() && !seq.is_dict() && !seq.is_string()) {
    fail(s.line, str_cat("'", type_name(seq), "' object is not iterable"));
  }
  std::vector<Value> all = iterate(seq, s.line);
  std::shared_ptr<Scope> outer = scope_;
  auto bind = [&](Scope& sc, const Value& item) {
    if (s.targets.size() == 1) {
      sc.set(s.targets[0], item);
      return;
    }
    std::vector<Value> parts = iterate(item, s.line);
    if (parts.size() != s.targets.size()) {
      fail(s.line,
           str_cat("cannot unpack ", parts.size(), " values into ", s.targets.size(), " loop variables"));
    }
    for (size_t k = 0; k < parts.size(); ++k) sc.set(s.targets[k], parts[k]);
  };
  std::vector<Value> items;
  if (s.cond) {
    for (Value& item : all) {
      step(s.line);
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      bind(*scope_, item);
      bool keep = truthy(eval(*s.cond));
      scope_ = outer;
      if (keep) items.push_back(std::move(item));
    }
  } else {
    items = std::move(all);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    step(s.line);
    auto iter_scope = std::make_shared<Scope>();
    iter_scope->parent = outer;
    bind(*iter_scope, items[static_cast<size_t>(k)]);
    ValueDict loop;
    loop.items = {{"index", Value::integer(k + 1)},
                  {"index0", Value::integer(k)},
                  {"revindex", Value::integer(n - k)},
                  {"revindex0", Value::integer(n - k - 1)},
                  {"first", Value::boolean(k == 0)},
                  {"last", Value::boolean(k == n - 1)},
                  {"length", Value::integer(n)},
                  {"depth", Value::integer(1)},
                  {"depth0", Value::integer(0)},
                  {"previtem",
                   k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item")},
                  {"nextitem",
                   k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item")},
                  {"cycle", Value::callable("loop.cycle", [k](Interpreter&, CallArgs& a) {
                     if (a.args.empty()) fail(a.line, "loop.cycle() needs at least one argument");
                     return a.args[static_cast<size_t>(k) % a.args.size()];
                   })}};
    iter_scope->set("loop", Value::make_dict(std::move(loop)));
    scope_ = iter_scope;
    Flow f;
    try {
      f = exec(s.body, out);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (f == Flow::kBreak) break;
  }
  if (n == 0) {
    Flow f = exec(s.else_body, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Value Interpreter::call_macro(const Stmt& m, const std::weak_ptr<Scope>& defined_in, CallArgs& args,
                              int line) {
  std::shared_ptr<Scope> parent = defined_in.lock();
  if (!parent) fail(line, str_cat("macro '", m.text, "' called after the scope it was defined in ended"));
  if (args.args.size() > m.params.size()) {
    fail(line, str_cat("macro '", m.text, "' takes not more than ", m.params.size(), " argument(s)"));
  }
  if (call_depth_ >= opt_.max_call_depth)
    fail(line, str_cat("macro calls nested deeper than ", opt_.max_call_depth));
  auto frame = std::make_shared<Scope>();
  frame->parent = parent;
  std::shared_ptr<Scope> saved = scope_;
  scope_ = frame;
  ++call_depth_;
  std::string out;
  try {
    for (const auto& [k, v] : args.kwargs) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.name == k;
      if (!known) fail(line, str_cat("macro '", m.text, "' takes no keyword argument '", k, "'"));
    }
    for (size_t k = 0; k < m.params.size(); ++k) {
      const MacroParam& p = m.params[k];
      const Value* given = args.get(p.name, k);
      if (given) {
        frame->set(p.name, *given);
      } else if (p.default_value) {
        frame->set(p.name, eval(*p.default_value));
      } else {
        frame->set(p.name, Value::undefined(str_cat("parameter '", p.name, "' was not provided")));
      }
    }
    exec(m.body, out);
  } catch (...) {
    scope_ = saved;
    --call_depth_;
    throw;
  }
  scope_ = saved;
  --call_depth_;
  return Value::string(std::move(out));
}

Value Interpreter::call(const Value& fn, CallArgs& args, int line) {
  if (fn.is_undefined()) fail(line, fn.s.empty() ? "call of an undefined value" : fn.s);
  if (fn.kind != Value::Kind::kCallable) fail(line, str_cat("'", type_name(fn), "' object is not callable"));
  args.line = line;
  return fn.fn->fn(*this, args);
}

Value Interpreter::getattr(const Value& obj, const std::string& name, int line) {
  if (obj.is_undefined())
    fail(line, obj.s.empty() ? "attribute '" + name + "' of an undefined value" : obj.s);
  if (obj.is_dict()) {
    if (!obj.is_namespace) {
      Value m = bound_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined(
        str_cat("'", obj.is_namespace ? "Namespace" : "dict object", "' has no attribute '", name, "'"));
  }
  Value m = bound_method(obj, name);
  if (!m.is_undefined()) return m;
  return Value::undefined(str_cat("'", type_name(obj), " object' has no attribute '", name, "'"));
}

Value Interpreter::getitem(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) fail(line, obj.s.empty() ? "subscript of an undefined value" : obj.s);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict->find(key.s)) return *v;
    if (!obj.is_namespace) return getattr(obj, key.s, line);
    return Value::undefined(str_cat("'dict object' has no attribute '", key.s, "'"));
  }
  if ((obj.is_list() || obj.is_string()) &&
      (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool)) {
    int64_t idx = key.kind == Value::Kind::kBool ? key.b : key.i;
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list->size());
      if (idx < 0) idx += n;
      if (idx < 0 || idx >= n) return Value::undefined(str_cat("list index ", key.i, " out of range"));
      return (*obj.list)[static_cast<size_t>(idx)];
    }
    auto cps = code_points(obj.s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) return Value::undefined(str_cat("string index ", key.i, " out of range"));
    return Value::string(std::string(cps[static_cast<size_t>(idx)]));
  }
  if (key.is_string()) return getattr(obj, key.s, line);
  return Value::undefined(str_cat("'", type_name(obj), " object' has no item ", repr(key)));
}

std::vector<Value> Interpreter::iterate(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      charge(v.list->size(), line);
      return *v.list;
    case Value::Kind::kDict: {
      if (v.is_namespace) break;
      charge(v.dict->items.size(), line);
      std::vector<Value> keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      charge(v.s.size(), line);
      std::vector<Value> chars;
      for (auto cp : code_points(v.s)) chars.push_back(Value::string(std::string(cp)));
      return chars;
    }
    default:
      break;
  }
  fail(line, str_cat("'", type_name(v), "' object is not iterable"));
}

namespace {

int64_t slice_index(const Value* v, int64_t dflt, int line) {
  if (!v || v->is_none()) return dflt;
  if (v->kind == Value::Kind::kInt) return v->i;
  if (v->kind == Value::Kind::kBool) return v->b;
  fail(line, "slice indices must be integers or None");
}

}  // namespace

Value Interpreter::eval(const Expr& e) {
  step(e.line);
  const Nested guard(*this, e.line);
  switch (e.type) {
    case Expr::Type::kLiteral:
      return e.value;
    case Expr::Type::kName:
      return lookup(e.name, e.line);
    case Expr::Type::kList:
    case Expr::Type::kTuple: {
      ValueList items;
      for (const auto& x : e.items) items.push_back(eval(*x));
      return Value::make_list(std::move(items), e.type == Expr::Type::kTuple);
    }
    case Expr::Type::kDict: {
      ValueDict d;
      for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
        Value key = eval(*e.items[k]);
        if (!key.is_string()) fail(e.line, "unsupported: dict keys other than strings");
        d.set(key.s, eval(*e.items[k + 1]));
      }
      return Value::make_dict(std::move(d));
    }
    case Expr::Type::kGetattr:
      return getattr(eval(*e.a), e.name, e.line);
    case Expr::Type::kGetitem: {
      Value obj = eval(*e.a);
      return getitem(obj, eval(*e.b), e.line);
    }
    case Expr::Type::kSlice: {
      Value obj = eval(*e.a);
      Value parts[3];
      for (int k = 0; k < 3; ++k)
        parts[k] = e.items[static_cast<size_t>(k)] ? eval(*e.items[static_cast<size_t>(k)]) : Value::none();
      if (obj.is_undefined()) fail(e.line, obj.s.empty() ? "slice of an undefined value" : obj.s);
      if (!obj.is_list() && !obj.is_string())
        fail(e.line, str_cat("'", type_name(obj), "' object is not sliceable"));
      int64_t step_v = slice_index(&parts[2], 1, e.line);
      if (step_v == 0) fail(e.line, "slice step cannot be zero");
      std::vector<std::string_view> cps;
      if (obj.is_string()) cps = code_points(obj.s);
      int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(cps.size());
      auto clamp = [&](int64_t i) {
        if (i < 0) i += n;
        if (step_v > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
      };
      int64_t start =
          parts[0].is_none() ? (step_v > 0 ? 0 : n - 1) : clamp(slice_index(&parts[0], 0, e.line));
      int64_t stop = parts[1].is_none() ? (step_v > 0 ? n : -1) : clamp(slice_index(&parts[1], 0, e.line));
      ValueList items;
      std::string s;
      for (int64_t i = start; step_v > 0 ? i < stop : i > stop; i += step_v) {
        if (obj.is_list()) {
          items.push_back((*obj.list)[static_cast<size_t>(i)]);
        } else {
          s += cps[static_cast<size_t>(i)];
        }
      }
      return obj.is_list() ? Value::make_list(std::move(items), obj.is_tuple) : Value::string(std::move(s));
    }
    case Expr::Type::kCall: {
      Value fn = eval(*e.a);
      CallArgs args;
      for (const auto& x : e.items) args.args.push_back(eval(*x));
      for (const auto& [k, x] : e.kwargs) args.kwargs.emplace_back(k, eval(*x));
      return call(fn, args, e.line);
    }
    case Expr::Type::kFilter: {
      Value input = eval(*e.a);
      CallArgs args;
      args.line = e.line;
      for (const auto& x : e.items) args.args.push_back(eval(*x));
      for (const auto& [k, x] : e.kwargs) args.kwargs.emplace_back(k, eval(*x));
      return call_filter(*this, e.name, input, args);
    }
    case Expr::Type::kTest: {
      Value v = eval(*e.a);
      CallArgs args;
      args.line = e.line;
      for (const auto& x : e.items) args.args.push_back(eval(*x));
      for (const auto& [k, x] : e.kwargs) args.kwargs.emplace_back(k, eval(*x));
      return Value::boolean(call_test(*this, e.name, v, args) != e.negated);
    }
    case Expr::Type::kUnary: {
      Value v = eval(*e.a);
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (v.is_undefined()) fail(e.line, v.s.empty() ? "undefined value in arithmetic" : v.s);
      if (!v.is_number())
        fail(e.line, str_cat("bad operand type for unary ", e.name, ": '", type_name(v), "'"));
      if (e.name == "+") return v.kind == Value::Kind::kBool ? Value::integer(v.b) : v;
      if (v.kind == Value::Kind::kFloat) return Value::number(-v.f);
      return Value::integer(-(v.kind == Value::Kind::kBool ? v.b : v.i));
    }
    case Expr::Type::kBinary:
      return binary(e);
    case Expr::Type::kCompare: {
      Value left = eval(*e.a);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.items[k]);
        if (!compare(e.ops[k], left, right, e.line)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Type::kCond:
      if (truthy(eval(*e.a))) return eval(*e.b);
      return e.c ? eval(*e.c)
                 : Value::undefined("the condition of an 'if' expression without 'else' was false");
  }
  fail(e.line, "internal: unknown expression");
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a, line);
  if (op == "not in") return !contains(b, a, line);
  if (op == "<") return less_than(a, b, line);
  if (op == ">") return less_than(b, a, line);
  if (op == "<=") return !less_than(b, a, line);
  return !less_than(a, b, line);  // >=
}

Value Interpreter::binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.a);
    return truthy(a) ? eval(*e.b) : a;
  }
  if (op == "or") {
    Value a = eval(*e.a);
    return truthy(a) ? a : eval(*e.b);
  }
  Value a = eval(*e.a);
  Value b = eval(*e.b);
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    charge(s.size() / kBytesPerStep, e.line);
    return Value::string(std::move(s));
  }
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) fail(e.line, v->s.empty() ? "undefined value in arithmetic" : v->s);
  }
  auto type_error = [&]() -> Value {
    fail(e.line,
         str_cat("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '", type_name(b), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      charge((a.s.size() + b.s.size()) / kBytesPerStep, e.line);
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
      charge(a.list->size() + b.list->size(), e.line);
      ValueList items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(items), a.is_tuple);
    }
    if (a.is_string() || b.is_string()) {
      fail(e.line,
           str_cat("can only concatenate str (not \"", type_name(a.is_string() ? b : a), "\") to str"));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& cnt = &seq == &a ? b : a;
    if (cnt.kind != Value::Kind::kInt && cnt.kind != Value::Kind::kBool) return type_error();
    int64_t n = std::max<int64_t>(0, cnt.kind == Value::Kind::kBool ? cnt.b : cnt.i);
    const size_t unit = seq.is_string() ? seq.s.size() : seq.list->size();
    // Divided, not multiplied: unit * n wraps around for a huge n. An empty sequence repeats to itself
    // without spinning n times.
    if (unit != 0 && static_cast<uint64_t>(n) > opt_.max_output_bytes / unit)
      fail(e.line, "sequence repetition too large");
    if (unit == 0) n = 0;
    const uint64_t total = unit * static_cast<uint64_t>(n);
    charge(seq.is_string() ? total / kBytesPerStep : total, e.line);
    if (seq.is_string()) {
      std::string s;
      for (int64_t k = 0; k < n; ++k) s += seq.s;
      return Value::string(std::move(s));
    }
    ValueList items;
    for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.list->begin(), seq.list->end());
    return Value::make_list(std::move(items), seq.is_tuple);
  }
  if (op == "%" && a.is_string()) fail(e.line, "unsupported: printf-style string formatting with '%'");
  if (!a.is_number() || !b.is_number()) return type_error();
  bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
  int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i, y = b.kind == Value::Kind::kBool ? b.b : b.i;
  double fx = a.as_double(), fy = b.as_double();
  auto overflow = [&] { fail(e.line, "integer overflow"); };
  if (op == "+" || op == "-" || op == "*") {
    if (ints) {
      int64_t r;
      bool bad = op == "+"   ? __builtin_add_overflow(x, y, &r)
                 : op == "-" ? __builtin_sub_overflow(x, y, &r)
                             : __builtin_mul_overflow(x, y, &r);
      if (bad) overflow();
      return Value::integer(r);
    }
    return Value::number(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
  }
  if (op == "/") {
    if (fy == 0) fail(e.line, "division by zero");
    return Value::number(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints ? y == 0 : fy == 0)
      fail(e.line, op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    double r = std::fmod(fx, fy);
    if (r != 0 && ((r < 0) != (fy < 0))) r += fy;
    return Value::number(op == "//" ? std::floor(fx / fy) : r);
  }
  if (op == "**") {
    if (ints && y >= 0) {
      if (x == 0 || x == 1) return Value::integer(y == 0 ? 1 : x);
      if (x == -1) return Value::integer(y % 2 ? -1 : 1);
      int64_t r = 1;
      for (int64_t k = 0; k < y; ++k) {
        if (__builtin_mul_overflow(r, x, &r)) overflow();
      }
      return Value::integer(r);
    }
    return Value::number(std::pow(fx, fy));
  }
  return type_error();
}

}  // namespace mtp::chat::jinja
