// Aggregate throughput of `mtp serve` by concurrency and speculation profile (the seed
// report's threshold sweep). It starts one server per profile, and for each concurrency c runs, on each
// server in turn, `rounds * c` requests from c client threads (every request greedy, ignore_eos, the same
// max_tokens, or with --min-tokens N one drawn in [N, --max-tokens] per request, its own prompt), then
// reports aggregate generated tokens per second of wall time, and the acceptance the server's counters saw.
//
//   server_sweep -m MODEL [-np 16] [-c 8192] [-t N] [--max-tokens 64] [--min-tokens N] [--rounds 2]
//                [--levels 1,2,4,8,16] [--profiles off,on,slots1,auto] [--draft-max 3] [--repeat 1]
//                [--draft-vocab N] [--extra "ARGS"]
//
// Profiles: off = --spec none; on = --spec mtp (every generating slot drafts); slots1 = --spec mtp
// --spec-max-drafting-slots 1 (the seed's throttle); auto = --spec mtp --spec-policy auto. --draft-vocab N
// goes to the MTP profiles only (mtp serve refuses it without --spec mtp); --extra to every server.
//
// --repeat N runs every level N times on every server, in alternating order (forward, then backward, ...).
// On a shared 2-core machine two identical servers measured one after the other differ by up to 20% (the
// machine's speed drifts between runs, and the first of a pair is often faster), which buries a 2% effect;
// each profile's figure relative to MTP off is then the median of the ratios within each repetition (a
// profile and MTP off measured minutes, not seconds, apart never form a pair), printed with their range.
// tok/s is all repetitions' tokens over all their seconds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http_client.h"
#include "server_process.h"
#include "sweep_options.h"

namespace {

using Json = nlohmann::json;
using mtp::testing::http_get;
using mtp::testing::http_post;
using mtp::testing::ServerProcess;

struct Options : mtp::bench::SweepOptions {
  std::string extra;
  int repeat = 1;
  int64_t draft_vocab = 0;
};

std::string profile_args(const std::string& p, int draft_max, int64_t draft_vocab) {
  std::string mtp = " --spec mtp --draft-max " + std::to_string(draft_max);
  if (draft_vocab > 0) mtp += " --draft-vocab " + std::to_string(draft_vocab);
  if (p == "off") return " --spec none";
  if (p == "on") return mtp;
  if (p == "slots1") return mtp + " --spec-max-drafting-slots 1";
  if (p == "auto") return mtp + " --spec-policy auto";
  throw std::runtime_error("unknown profile '" + p + "' (off, on, slots1, auto)");
}

double metric(int port, const std::string& name) {
  const std::string text = http_get(port, "/metrics").body;
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? 0.0 : std::stod(text.substr(at + name.size() + 2));
}

struct Level {
  int64_t tokens = 0;
  double seconds = 0;
  double drafted = 0, accepted = 0;
  int failures = 0;
  double tok_s() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
  double acceptance() const { return drafted > 0 ? accepted / drafted : -1.0; }  // -1: nothing drafted
  void add(const Level& o) {
    tokens += o.tokens;
    seconds += o.seconds;
    drafted += o.drafted;
    accepted += o.accepted;
    failures += o.failures;
  }
};

Level run_level(int port, int concurrency, const Options& o) {
  const int n_requests = std::max(1, o.rounds) * concurrency;
  std::atomic<int> next{0}, failures{0};
  std::atomic<int64_t> tokens{0};
  const double drafted0 = metric(port, "mtp_draft_tokens_total");
  const double accepted0 = metric(port, "mtp_draft_accepted_tokens_total");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (int i; (i = next++) < n_requests;) {
        Json body = {{"prompt", mtp::bench::sweep_prompt(i)},
                     {"max_tokens", mtp::bench::request_tokens(o, i)},
                     {"temperature", 0},
                     {"ignore_eos", true}};
        auto r = http_post(port, "/v1/completions", body.dump());
        if (r.status != 200) {
          ++failures;
          continue;
        }
        tokens += Json::parse(r.body)["usage"]["completion_tokens"].get<int64_t>();
      }
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Level l;
  l.tokens = tokens.load();
  l.seconds = seconds;
  l.failures = failures.load();
  l.drafted = metric(port, "mtp_draft_tokens_total") - drafted0;
  l.accepted = metric(port, "mtp_draft_accepted_tokens_total") - accepted0;
  return l;
}

int run(const Options& o) {
  // Every profile's server runs from the start, and each concurrency level runs on all of them in turn
  // (starting with a different one per level): a slow stretch of a shared machine then lands on every
  // profile in turn rather than on whichever profile ran at the time. An idle server costs nothing.
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (const std::string& p : o.profiles) {
    std::string args = "-m " + o.model + " -np " + std::to_string(o.n_slots) + " -c " +
                       std::to_string(o.n_ctx) + profile_args(p, o.draft_max, o.draft_vocab) + " " + o.extra;
    if (o.threads > 0) args += " -t " + std::to_string(o.threads);
    std::fprintf(stderr, "profile %s: mtp serve %s\n", p.c_str(), args.c_str());
    servers.push_back(std::make_unique<ServerProcess>(args));
  }
  Options warm = o;
  warm.rounds = 1;
  for (const auto& srv : servers) run_level(srv->port(), 1, warm);  // first touch, first measurements
  const size_t n_prof = servers.size(), n_levels = o.levels.size();
  std::vector<std::vector<Level>> results(n_prof, std::vector<Level>(n_levels));  // summed over repeats
  // ratio[i][li]: profile i's tok/s over MTP off's in the same repetition, one entry per repetition.
  std::vector<std::vector<std::vector<double>>> ratio(n_prof, std::vector<std::vector<double>>(n_levels));
  const auto off = std::find(o.profiles.begin(), o.profiles.end(), "off");
  const size_t i_off = static_cast<size_t>(off - o.profiles.begin());
  for (size_t li = 0; li < n_levels; ++li) {
    const int c = static_cast<int>(o.levels[li]);
    for (int rep = 0; rep < o.repeat; ++rep) {
      std::vector<Level> this_rep(n_prof);
      for (size_t j = 0; j < n_prof; ++j) {
        const size_t k = rep % 2 == 0 ? j : n_prof - 1 - j;  // forward, backward, ...
        const size_t i = (li + k) % n_prof;
        const Level l = run_level(servers[i]->port(), c, o);
        std::fprintf(stderr, "  c%-2d %-6s %8.2f tok/s%s\n", c, o.profiles[i].c_str(), l.tok_s(),
                     l.failures ? "  (FAILED REQUESTS)" : "");
        results[i][li].add(l);
        this_rep[i] = l;
      }
      if (off != o.profiles.end())
        for (size_t i = 0; i < n_prof; ++i)
          ratio[i][li].push_back(this_rep[i].tok_s() / this_rep[i_off].tok_s());
    }
  }
  for (const auto& srv : servers) srv->signal(SIGTERM);
  for (const auto& srv : servers) srv->wait(60);
  // One markdown table: a row per profile, a column per concurrency level, cells from `cell`.
  auto table = [&](const std::string& title, const char* col_suffix, const auto& cell) {
    std::printf("\n%s\n\n| profile |", title.c_str());
    for (int c : o.levels) std::printf(" c%d%s |", c, col_suffix);
    std::printf("\n|---|");
    for (size_t i = 0; i < o.levels.size(); ++i) std::printf("---:|");
    std::printf("\n");
    for (size_t p = 0; p < n_prof; ++p) {
      std::printf("| %s |", o.profiles[p].c_str());
      for (size_t i = 0; i < n_levels; ++i) cell(p, i);
      std::printf("\n");
    }
  };
  char title[160];
  const std::string answers = (o.min_tokens > 0 ? std::to_string(o.min_tokens) + "-" : std::string()) +
                              std::to_string(o.max_tokens) + "-token answers";
  std::snprintf(title, sizeof title,
                "Aggregate tok/s (%s, %d requests per client, -np %d, %d repetition%s):", answers.c_str(),
                o.rounds, o.n_slots, o.repeat, o.repeat > 1 ? "s" : "");
  table(title, " tok/s", [&](size_t p, size_t i) {
    std::printf(" %.2f%s |", results[p][i].tok_s(), results[p][i].failures ? "*" : "");
  });
  if (off != o.profiles.end()) {
    table(o.repeat > 1 ? "Relative to MTP off (median of the repetitions' ratios [lowest, highest]):"
                       : "Relative to MTP off:",
          "", [&](size_t p, size_t i) {
            std::vector<double> r = ratio[p][i];
            std::sort(r.begin(), r.end());
            const size_t m = r.size();
            const double med = m % 2 == 1 ? r[m / 2] : 0.5 * (r[m / 2 - 1] + r[m / 2]);
            std::printf(" %+.1f%%", 100.0 * (med - 1.0));
            if (m > 1) std::printf(" [%+.1f, %+.1f]", 100.0 * (r.front() - 1.0), 100.0 * (r.back() - 1.0));
            std::printf(" |");
          });
  }
  table("Draft acceptance (accepted / drafted; - = no drafting):", "", [&](size_t p, size_t i) {
    const double a = results[p][i].acceptance();
    a < 0 ? std::printf(" - |") : std::printf(" %.3f |", a);
  });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    try {
      if (mtp::bench::parse_sweep_flag(o, argc, argv, i)) continue;
      if (a == "--extra" && i + 1 < argc) {
        o.extra = argv[++i];
        continue;
      }
      if (a == "--draft-vocab" && i + 1 < argc) {
        o.draft_vocab = mtp::bench::parse_int(argv[++i], 0);
        continue;
      }
      if (a == "--repeat" && i + 1 < argc) {
        o.repeat = mtp::bench::parse_int32(argv[++i]);
        if (o.repeat < 1) throw std::invalid_argument("must be at least 1");
        continue;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "server_sweep: %s: %s\n", a.c_str(), e.what());
      return 2;
    }
    mtp::bench::usage_or_exit("server_sweep", a, "[--repeat N] [--draft-vocab N] [--extra \"ARGS\"]");
  }
  if (o.model.empty()) {
    std::fprintf(stderr, "server_sweep: -m MODEL is required\n");
    return 2;
  }
  if (const std::string e = mtp::bench::sweep_options_error(o); !e.empty()) {
    std::fprintf(stderr, "server_sweep: %s\n", e.c_str());
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server_sweep: %s\n", e.what());
    return 1;
  }
}
