// Recursive-descent parser for the Jinja subset, with Jinja's operator precedence.
#include <algorithm>

#include "jinja_ast.h"
#include "jinja_lexer.h"

namespace mtp::chat::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const JinjaOptions& opt) : t_(std::move(tokens)), opt_(opt) {}

  Body parse_all() {
    Body body = parse_body({});
    return body;
  }

 private:
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Token::Type::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Token::Type::kName && cur().text == n; }
  Token next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }

  std::string describe(const Token& t) const {
    switch (t.type) {
      case Token::Type::kText:
        return "template text";
      case Token::Type::kVarEnd:
        return "'}}'";
      case Token::Type::kBlockEnd:
        return "end of statement block '%}'";
      case Token::Type::kVarBegin:
        return "'{{'";
      case Token::Type::kBlockBegin:
        return "'{%'";
      case Token::Type::kEof:
        return "end of template";
      case Token::Type::kString:
        return "string literal";
      default:
        return "'" + t.text + "'";
    }
  }

  void expect_op(const char* op, const char* context) {
    if (!is_op(op)) fail(cur().line, str_cat("expected '", op, "' ", context, ", got ", describe(cur())));
    ++p_;
  }
  std::string expect_name(const char* context) {
    if (cur().type != Token::Type::kName)
      fail(cur().line, str_cat("expected a name ", context, ", got ", describe(cur())));
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().type != Token::Type::kBlockEnd) {
      fail(cur().line, str_cat("unexpected ", describe(cur()), " in '", tag, "' tag (expected '%}')"));
    }
    ++p_;
  }

  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser, int line) : p(parser) {
      if (++p.depth_ > p.opt_.max_nesting) fail(line, "template nested too deeply");
    }
    ~Depth() { --p.depth_; }
  };

  // Parses statements until a block tag whose name is in `ends` (left unconsumed: p_ at its name token).
  Body parse_body(const std::vector<std::string>& ends, const std::string& opener = "", int open_line = 0) {
    Depth guard(*this, cur().line);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Token::Type::kEof) {
        if (ends.empty()) return body;
        fail(tok.line, str_cat("unclosed '", opener, "' opened on line ", open_line, ": expected '{% ",
                               ends.back(), " %}' before the end of the template"));
      }
      if (tok.type == Token::Type::kText) {
        auto s = std::make_unique<Stmt>();
        s->type = Stmt::Type::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        ++p_;
      } else if (tok.type == Token::Type::kVarBegin) {
        ++p_;
        auto s = std::make_unique<Stmt>();
        s->type = Stmt::Type::kPrint;
        s->line = tok.line;
        s->expr = parse_tuple_expr();
        if (cur().type != Token::Type::kVarEnd) {
          fail(cur().line, str_cat("unexpected ", describe(cur()), " in '{{ ... }}' (expected '}}')"));
        }
        ++p_;
        body.push_back(std::move(s));
      } else if (tok.type == Token::Type::kBlockBegin) {
        const Token& name = peek();
        if (name.type != Token::Type::kName)
          fail(name.line, str_cat("expected a tag name after '{%', got ", describe(name)));
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          ++p_;
          return body;
        }
        ++p_;
        body.push_back(parse_statement(opener));
      } else {
        fail(tok.line, str_cat("unexpected ", describe(tok)));
      }
    }
  }

  StmtPtr parse_statement(const std::string& enclosing) {
    Token tag = next();
    auto s = std::make_unique<Stmt>();
    s->line = tag.line;
    const std::string& n = tag.text;
    if (n == "if") {
      s->type = Stmt::Type::kIf;
      s->conds.push_back(parse_tuple_expr());
      expect_block_end("if");
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, "if", tag.line));
        std::string end = next().text;
        if (end == "elif") {
          s->conds.push_back(parse_tuple_expr());
          expect_block_end("elif");
        } else if (end == "else") {
          expect_block_end("else");
          s->else_body = parse_body({"endif"}, "if", tag.line);
          ++p_;
          expect_block_end("endif");
          break;
        } else {
          expect_block_end("endif");
          break;
        }
      }
    } else if (n == "for") {
      s->type = Stmt::Type::kFor;
      bool paren = is_op("(");
      if (paren) ++p_;
      s->targets.push_back(expect_name("as the loop variable"));
      while (is_op(",")) {
        ++p_;
        s->targets.push_back(expect_name("as a loop variable"));
      }
      if (paren) expect_op(")", "after the loop variables");
      if (!is_name("in")) fail(cur().line, str_cat("expected 'in' in 'for' tag, got ", describe(cur())));
      ++p_;
      s->expr = parse_tuple_expr(/*allow_cond=*/false);
      if (is_name("if")) {
        ++p_;
        s->cond = parse_expr();
      }
      if (is_name("recursive")) fail(cur().line, "unsupported: recursive for loops");
      expect_block_end("for");
      ++loop_depth_;
      s->body = parse_body({"else", "endfor"}, "for", tag.line);
      --loop_depth_;
      if (next().text == "else") {
        expect_block_end("else");
        s->else_body = parse_body({"endfor"}, "for", tag.line);
        ++p_;
      }
      expect_block_end("endfor");
    } else if (n == "set") {
      std::string target = expect_name("after 'set'");
      if (is_op(".")) {
        ++p_;
        s->attr = expect_name("after '.' in 'set'");
      }
      s->targets.push_back(target);
      while (is_op(",")) {
        ++p_;
        s->targets.push_back(expect_name("in 'set'"));
      }
      if (is_op("=")) {
        ++p_;
        s->type = Stmt::Type::kSet;
        s->expr = parse_tuple_expr();
        expect_block_end("set");
      } else {
        if (!s->attr.empty() || s->targets.size() != 1) fail(tag.line, "block 'set' takes a single name");
        s->type = Stmt::Type::kSetBlock;
        if (is_op("|")) s->expr = parse_filters(nullptr);
        expect_block_end("set");
        s->body = parse_body({"endset"}, "set", tag.line);
        ++p_;
        expect_block_end("endset");
      }
    } else if (n == "macro") {
      s->type = Stmt::Type::kMacro;
      s->text = expect_name("after 'macro'");
      expect_op("(", "after the macro name");
      while (!is_op(")")) {
        MacroParam param;
        param.name = expect_name("as a macro parameter");
        if (is_op("=")) {
          ++p_;
          param.default_value = parse_expr();
        }
        s->params.push_back(std::move(param));
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op(")", "after the macro parameters");
      expect_block_end("macro");
      int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"}, "macro", tag.line);
      loop_depth_ = saved_loop_depth;
      ++p_;
      if (cur().type == Token::Type::kName) ++p_;  // {% endmacro name %}
      expect_block_end("endmacro");
    } else if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail(tag.line, str_cat("'", n, "' outside of a loop"));
      s->type = n == "break" ? Stmt::Type::kBreak : Stmt::Type::kContinue;
      expect_block_end(n);
    } else if (n == "generation") {
      s->type = Stmt::Type::kGeneration;
      expect_block_end(n);
      s->body = parse_body({"endgeneration"}, "generation", tag.line);
      ++p_;
      expect_block_end("endgeneration");
    } else if (n == "endif" || n == "endfor" || n == "endmacro" || n == "endset" || n == "else" ||
               n == "elif" || n == "endgeneration") {
      fail(tag.line, str_cat("unexpected '{% ", n, " %}'",
                             enclosing.empty() ? std::string(" with no open block")
                                               : str_cat(" inside '", enclosing, "'")));
    } else {
      static const char* const kKnown[] = {"include", "import", "from", "extends",    "block", "call",
                                           "filter",  "with",   "do",   "autoescape", "trans"};
      for (const char* k : kKnown) {
        if (n == k) fail(tag.line, str_cat("unsupported tag '", n, "'"));
      }
      fail(tag.line, str_cat("unknown tag '", n, "'"));
    }
    return s;
  }

  ExprPtr node(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // `e` with its height set from its children's, which were sealed when built. Chains ("a ~ b ~ c", "x.a.b",
  // "v | f | g", "a if c else b if d") grow in loops, not by recursion, so the Depth guard does not see them;
  // each link is sealed here, which stops a chain at max_nesting links, before it can overflow the stack of
  // the interpreter (or of the tree's destructor).
  ExprPtr sealed(ExprPtr e) {
    int below = 0;
    for (const ExprPtr* child : {&e->a, &e->b, &e->c}) {
      if (*child) below = std::max(below, (*child)->height);
    }
    for (const ExprPtr& item : e->items) {
      if (item) below = std::max(below, item->height);
    }
    for (const auto& [key, value] : e->kwargs) {
      if (value) below = std::max(below, value->height);
    }
    e->height = below + 1;
    if (e->height > opt_.max_nesting) fail(e->line, "expression nested too deeply");
    return e;
  }

  // A bare tuple is allowed at the top of {{ }}, `set` and `for ... in`.
  ExprPtr parse_tuple_expr(bool allow_cond = true) {
    int line = cur().line;
    ExprPtr first = allow_cond ? parse_expr() : parse_or();
    if (!is_op(",")) return first;
    auto t = node(Expr::Type::kTuple, line);
    t->items.push_back(std::move(first));
    while (is_op(",")) {
      ++p_;
      if (cur().type == Token::Type::kVarEnd || cur().type == Token::Type::kBlockEnd || is_name("if")) break;
      t->items.push_back(allow_cond ? parse_expr() : parse_or());
    }
    return sealed(std::move(t));
  }

  ExprPtr parse_expr() {
    Depth guard(*this, cur().line);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = node(Expr::Type::kCond, cur().line);
      ++p_;
      c->a = parse_or();
      c->b = std::move(e);
      if (is_name("else")) {
        ++p_;
        c->c = parse_expr();
      }
      e = sealed(std::move(c));
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = node(Expr::Type::kBinary, line);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return sealed(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = next().line;
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = next().line;
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth guard(*this, cur().line);
      auto e = node(Expr::Type::kUnary, next().line);
      e->name = "not";
      e->a = parse_not();
      return sealed(std::move(e));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Token::Type::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                             cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && peek().type == Token::Type::kName && peek().text == "in") {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Type::kCompare, e->line);
        cmp->a = std::move(e);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? sealed(std::move(cmp)) : std::move(e);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token op = next();
      e = binary(op.text, std::move(e), parse_concat(), op.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token op = next();
      e = binary(op.text, std::move(e), parse_pow(), op.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth guard(*this, cur().line);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Type::kUnary, cur().line);
      e->name = next().text;
      e->a = parse_unary(false);
      e = sealed(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == Token::Type::kName) {
      ++p_;
      const std::string& n = tok.text;
      if (n == "true" || n == "True") return literal(Value::boolean(true), line);
      if (n == "false" || n == "False") return literal(Value::boolean(false), line);
      if (n == "none" || n == "None") return literal(Value::none(), line);
      auto e = node(Expr::Type::kName, line);
      e->name = n;
      return e;
    }
    if (tok.type == Token::Type::kString) {
      std::string s;
      while (cur().type == Token::Type::kString) s += next().text;  // adjacent literals concatenate
      return literal(Value::string(std::move(s)), line);
    }
    if (tok.type == Token::Type::kInt) return literal(Value::integer(next().i), line);
    if (tok.type == Token::Type::kFloat) return literal(Value::number(next().f), line);
    if (is_op("(")) {
      ++p_;
      if (is_op(")")) {
        ++p_;
        return node(Expr::Type::kTuple, line);
      }
      ExprPtr first = parse_expr();
      if (is_op(")")) {
        ++p_;
        return first;
      }
      auto t = node(Expr::Type::kTuple, line);
      t->items.push_back(std::move(first));
      while (is_op(",")) {
        ++p_;
        if (is_op(")")) break;
        t->items.push_back(parse_expr());
      }
      expect_op(")", "to close '('");
      return sealed(std::move(t));
    }
    if (is_op("[")) {
      ++p_;
      auto l = node(Expr::Type::kList, line);
      while (!is_op("]")) {
        l->items.push_back(parse_expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]", "to close '['");
      return sealed(std::move(l));
    }
    if (is_op("{")) {
      ++p_;
      auto d = node(Expr::Type::kDict, line);
      while (!is_op("}")) {
        d->items.push_back(parse_expr());
        expect_op(":", "in a dict literal");
        d->items.push_back(parse_expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}", "to close '{'");
      return sealed(std::move(d));
    }
    fail(line, str_cat("expected an expression, got ", describe(tok)));
  }

  ExprPtr literal(Value v, int line) {
    auto e = node(Expr::Type::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(", "");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(cur().line, "unsupported: *args / **kwargs in a call");
      if (cur().type == Token::Type::kName && peek().type == Token::Type::kOp && peek().text == "=") {
        std::string key = next().text;
        ++p_;
        e.kwargs.emplace_back(key, parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(cur().line, "positional argument after keyword argument");
        e.items.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")", "to close the argument list");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = cur().line;
      if (is_op(".")) {
        ++p_;
        if (cur().type == Token::Type::kInt) {
          auto g = node(Expr::Type::kGetitem, line);
          g->a = std::move(e);
          g->b = literal(Value::integer(next().i), line);
          e = sealed(std::move(g));
          continue;
        }
        auto g = node(Expr::Type::kGetattr, line);
        g->name = expect_name("after '.'");
        g->a = std::move(e);
        e = sealed(std::move(g));
      } else if (is_op("[")) {
        ++p_;
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (!is_op(":") && !is_op("]")) parts[n] = parse_expr();
          if (is_op(":") && n < 2) {
            ++p_;
            slice = true;
            ++n;
            continue;
          }
          break;
        }
        expect_op("]", "to close the subscript");
        if (slice) {
          auto s = node(Expr::Type::kSlice, line);
          s->a = std::move(e);
          for (auto& part : parts) s->items.push_back(std::move(part));
          e = sealed(std::move(s));
        } else {
          if (!parts[0]) fail(line, "empty subscript '[]'");
          auto g = node(Expr::Type::kGetitem, line);
          g->a = std::move(e);
          g->b = std::move(parts[0]);
          e = sealed(std::move(g));
        }
      } else if (is_op("(")) {
        auto c = node(Expr::Type::kCall, line);
        c->a = std::move(e);
        parse_call_args(*c);
        e = sealed(std::move(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (is_op("|")) {
      int line = next().line;
      auto f = node(Expr::Type::kFilter, line);
      f->name = expect_name("after '|'");
      if (!has_filter(f->name)) fail(line, str_cat("unknown filter '", f->name, "'"));
      f->a = std::move(e);
      if (is_op("(")) parse_call_args(*f);
      e = sealed(std::move(f));
    }
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filters(std::move(e));
      } else if (is_name("is")) {
        int line = next().line;
        auto t = node(Expr::Type::kTest, line);
        if (is_name("not")) {
          ++p_;
          t->negated = true;
        }
        t->name = expect_name("after 'is'");
        if (!has_test(t->name)) fail(line, str_cat("unknown test '", t->name, "'"));
        t->a = std::move(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == Token::Type::kName || cur().type == Token::Type::kString ||
                    cur().type == Token::Type::kInt || cur().type == Token::Type::kFloat || is_op("(") ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
          if (is_name("is")) fail(cur().line, "cannot chain multiple tests with 'is'");
          t->items.push_back(parse_postfix(parse_primary()));
        }
        e = sealed(std::move(t));
      } else if (is_op("(")) {
        auto c = node(Expr::Type::kCall, cur().line);
        c->a = std::move(e);
        parse_call_args(*c);
        e = sealed(std::move(c));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  const JinjaOptions& opt_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse_program(std::string_view source, const JinjaOptions& options) {
  auto program = std::make_unique<Program>();
  program->options = options;
  Parser parser(lex(source, options), options);
  program->body = parser.parse_all();
  return program;
}

}  // namespace mtp::chat::jinja
