// The checks a parsed grammar must pass before a matcher runs it: every rule reachable from the root can
// finish (derives some finite string), no rule is left-recursive (the matcher expands rules depth-first and
// would never stop), and the root matches something other than the empty string.
#include <functional>

#include "grammar/grammar.h"

namespace mtp::grammar {
namespace {

// Visits the elements of one alternative starting at elems[start], up to its kEnd.
template <typename F>
void for_each_element(const Grammar& g, uint32_t start, F&& f) {
  for (uint32_t p = start; g.elems[p].kind != ElemKind::kEnd; ++p) f(g.elems[p]);
}

// Least fixpoint of "rule r has an alternative whose every element satisfies elem_ok" (and, with
// need_nonempty, at least one element that consumes input).
std::vector<bool> fixpoint(const Grammar& g,
                           const std::function<bool(const Element&, const std::vector<bool>&)>& ok,
                           const std::function<bool(const Element&, const std::vector<bool>&)>& consumes) {
  std::vector<bool> holds(g.rule_alts.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rule_alts.size(); ++r) {
      if (holds[r]) continue;
      for (uint32_t start : g.rule_alts[r]) {
        bool all = true, any = !consumes;
        for_each_element(g, start, [&](const Element& e) {
          all = all && ok(e, holds);
          if (consumes && consumes(e, holds)) any = true;
        });
        if (all && any) {
          holds[r] = changed = true;
          break;
        }
      }
    }
  }
  return holds;
}

std::vector<bool> reachable_from(const Grammar& g, uint32_t root) {
  std::vector<bool> seen(g.rule_alts.size(), false);
  std::vector<uint32_t> todo{root};
  seen[root] = true;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    for (uint32_t start : g.rule_alts[r])
      for_each_element(g, start, [&](const Element& e) {
        if (e.kind == ElemKind::kRule && !seen[e.arg]) {
          seen[e.arg] = true;
          todo.push_back(e.arg);
        }
      });
  }
  return seen;
}

// Rules each rule can expand to without consuming input first: those at an alternative's head, or after a
// prefix of nullable rules.
std::vector<std::vector<uint32_t>> left_edges(const Grammar& g, const std::vector<bool>& nullable) {
  std::vector<std::vector<uint32_t>> edges(g.rule_alts.size());
  for (size_t r = 0; r < g.rule_alts.size(); ++r)
    for (uint32_t start : g.rule_alts[r])
      for (uint32_t p = start; g.elems[p].kind == ElemKind::kRule; ++p) {
        edges[r].push_back(g.elems[p].arg);
        if (!nullable[g.elems[p].arg]) break;
      }
  return edges;
}

// A cycle of left edges as "a -> b -> a", or empty when there is none.
std::string find_left_cycle(const Grammar& g, const std::vector<std::vector<uint32_t>>& edges) {
  enum Color : uint8_t { kWhite, kGrey, kBlack };
  std::vector<Color> color(edges.size(), kWhite);
  std::vector<uint32_t> path;
  std::function<std::string(uint32_t)> visit = [&](uint32_t r) -> std::string {
    color[r] = kGrey;
    path.push_back(r);
    for (uint32_t next : edges[r]) {
      if (color[next] == kGrey) {
        std::string cycle;
        bool on = false;
        for (uint32_t p : path) {
          on = on || p == next;
          if (on) cycle += g.rule_names[p] + " -> ";
        }
        return cycle + g.rule_names[next];
      }
      if (color[next] == kWhite)
        if (std::string c = visit(next); !c.empty()) return c;
    }
    path.pop_back();
    color[r] = kBlack;
    return "";
  };
  for (uint32_t r = 0; r < edges.size(); ++r)
    if (color[r] == kWhite)
      if (std::string c = visit(r); !c.empty()) return c;
  return "";
}

}  // namespace

Status check_grammar(const Grammar& g, const std::vector<std::string>& where) {
  const auto productive = fixpoint(
      g,
      [&](const Element& e, const std::vector<bool>& h) {
        return e.kind == ElemKind::kRule ? bool(h[e.arg]) : !g.char_sets[e.arg].ranges.empty();
      },
      nullptr);
  const auto reachable = reachable_from(g, g.root);
  for (size_t r = 0; r < g.rule_alts.size(); ++r)
    if (reachable[r] && !productive[r])
      return invalid_argument(
          where[r], ": rule '", g.rule_names[r],
          "' can never finish (every alternative needs an endless expansion or an empty class)");
  const auto nullable = fixpoint(
      g, [](const Element& e, const std::vector<bool>& h) { return e.kind == ElemKind::kRule && h[e.arg]; },
      nullptr);
  if (std::string cycle = find_left_cycle(g, left_edges(g, nullable)); !cycle.empty())
    return invalid_argument("left recursion, which this matcher cannot run: ", cycle);
  const auto nonempty = fixpoint(
      g,
      [&](const Element& e, const std::vector<bool>&) {
        return e.kind == ElemKind::kRule ? bool(productive[e.arg]) : !g.char_sets[e.arg].ranges.empty();
      },
      [](const Element& e, const std::vector<bool>& h) { return e.kind == ElemKind::kChars || h[e.arg]; });
  if (!nonempty[g.root])
    return invalid_argument(where[g.root], ": rule '", g.rule_names[g.root],
                            "' matches only the empty string");
  return Status::Ok();
}

}  // namespace mtp::grammar
