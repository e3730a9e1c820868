// The flags server_sweep (over HTTP) and engine_sweep (in process) share, and their one parser.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "loadgen/prompts.h"

namespace mtp::bench {

// Request `id`'s prompt: it ends in words of its own (loadgen/prompts.h), so the requests' continuations
// differ as real traffic's do. With prompts that all ended "... of the sweep: the model", a synthetic model's
// greedy continuations were the same token in every slot, whose rows then chose the same experts: a 4-row
// plain step cost 23 ms instead of 28 (2 threads, 35B-A3B widths, IQ4_XS), so plain decoding at c > 1 looked
// faster than it is, and drafting, which moves slots apart, 8-18% worse than plain at c4.
inline std::string sweep_prompt(int64_t id) {
  return "Request " + std::to_string(id) + " of the sweep: " + loadgen::synthetic_prompt(20261207, id, 8);
}

struct SweepOptions {
  std::string model;
  int n_slots = 16;
  int64_t n_ctx = 8192;
  int threads = 0;
  int max_tokens = 64;
  // > 0: each request's max_tokens drawn in [min_tokens, max_tokens] (request_tokens); 0: all max_tokens.
  int min_tokens = 0;
  int rounds = 2;
  int draft_max = 3;
  std::vector<int64_t> levels = {1, 2, 4, 8, 16};
  std::vector<std::string> profiles = {"off", "on", "slots1", "auto"};
};

inline constexpr const char* kSweepUsage =
    "-m MODEL [-np N] [-c N] [-t N] [--max-tokens N] [--min-tokens N] [--rounds N] [--levels 1,2,4,8,16] "
    "[--profiles off,on,slots1,auto] [--draft-max N]";

// Request `id`'s max_tokens. With --min-tokens, uniform in [min_tokens, max_tokens] from a generator seeded
// by the id, so every profile and level serves the same lengths: with one length for all, a closed loop's
// clients stay in lockstep while nothing drafts (their requests end on the same step and the next prompts
// share one batch) and fall out of it once slots accept different numbers of drafts, which served traffic,
// whose answers differ in length, never shows. Measured at c4 with 128-token requests (AMD EPYC Zen 4, 2
// threads): after 10 drafting steps auto's requests ran out of step, and its prompt steps and steps with 3
// slots generating cost more than the drafting steps did.
inline int request_tokens(const SweepOptions& o, int64_t id) {
  if (o.min_tokens <= 0) return o.max_tokens;
  return loadgen::prompt_length(20261208, id, o.min_tokens, o.max_tokens);
}

// The options' one check across flags (each flag's own range is checked as it is parsed): a message, or "".
inline std::string sweep_options_error(const SweepOptions& o) {
  if (o.min_tokens > o.max_tokens)
    return "--min-tokens " + std::to_string(o.min_tokens) + " is above --max-tokens " +
           std::to_string(o.max_tokens);
  return "";
}

// "a,b,,c" -> {"a", "b", "c"}
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// `v` as a whole number in [lo, hi], or an error naming it ("12x" and "" are errors, not 12 and 0).
inline int64_t parse_int(const std::string& v, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) throw std::invalid_argument("'" + v + "' is not a whole number");
  if (n < lo || n > hi) throw std::invalid_argument("'" + v + "' is out of range");
  return n;
}
// The same for an int field.
inline int parse_int32(const std::string& v) {
  return static_cast<int>(parse_int(v, INT32_MIN, INT32_MAX));
}

// Takes argv[i] and its value when argv[i] is one of the shared flags (i then points at the value) and
// returns true; false for any other argument. A shared flag without a value or with a malformed number
// throws.
inline bool parse_sweep_flag(SweepOptions& o, int argc, char** argv, int& i) {
  const std::string a = argv[i];
  auto value = [&]() -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
    return argv[++i];
  };
  if (a == "-m")
    o.model = value();
  else if (a == "-np")
    o.n_slots = parse_int32(value());
  else if (a == "-c")
    o.n_ctx = parse_int(value());
  else if (a == "-t")
    o.threads = parse_int32(value());
  else if (a == "--max-tokens")
    o.max_tokens = parse_int32(value());
  else if (a == "--min-tokens")
    o.min_tokens = static_cast<int>(parse_int(value(), 1, INT32_MAX));
  else if (a == "--rounds")
    o.rounds = parse_int32(value());
  else if (a == "--draft-max")
    o.draft_max = parse_int32(value());
  else if (a == "--profiles")
    o.profiles = split_list(value());
  else if (a == "--levels") {
    o.levels.clear();
    for (const std::string& s : split_list(value())) o.levels.push_back(parse_int(s));
  } else {
    return false;
  }
  return true;
}

// An argument no parser took: --help / -h prints the usage on stdout (exit 0); anything else is named on one
// line (exit 2).
[[noreturn]] inline void usage_or_exit(const char* program, const std::string& arg, const char* more_flags) {
  if (arg == "--help" || arg == "-h") {
    std::printf("usage: %s %s %s\n", program, kSweepUsage, more_flags);
    std::exit(0);
  }
  std::fprintf(stderr, "%s: unknown argument '%s' (--help for the usage)\n", program, arg.c_str());
  std::exit(2);
}

}  // namespace mtp::bench
