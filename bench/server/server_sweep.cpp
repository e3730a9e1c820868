// Aggregate throughput of `mtp serve` by concurrency and speculation profile (issue 8's numbers; the seed
// report's threshold sweep). It starts one server per profile, and for each concurrency c runs, on each
// server in turn, `rounds * c` requests from c client threads (every request greedy, ignore_eos, the same
// max_tokens, its own prompt), then reports aggregate generated tokens per second of wall time, and the
// acceptance the server's counters saw.
//
//   server_sweep -m MODEL [-np 16] [-c 8192] [-t N] [--max-tokens 64] [--rounds 2]
//                [--levels 1,2,4,8,16] [--profiles off,on,slots1,auto] [--draft-max 3] [--extra "ARGS"]
//
// Profiles: off = --spec none; on = --spec mtp (every generating slot drafts); slots1 = --spec mtp
// --spec-max-drafting-slots 1 (the seed's throttle); auto = --spec mtp --spec-policy auto.
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
};

std::string profile_args(const std::string& p, int draft_max) {
  const std::string mtp = " --spec mtp --draft-max " + std::to_string(draft_max);
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
  double tok_s = 0;
  double acceptance = -1;  // accepted / drafted over the level; -1 when nothing was drafted
  int failures = 0;
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
        Json body = {{"prompt", "Request " + std::to_string(i) + " of the sweep: the model"},
                     {"max_tokens", o.max_tokens},
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
  l.tok_s = static_cast<double>(tokens.load()) / seconds;
  l.failures = failures.load();
  const double drafted = metric(port, "mtp_draft_tokens_total") - drafted0;
  if (drafted > 0) l.acceptance = (metric(port, "mtp_draft_accepted_tokens_total") - accepted0) / drafted;
  return l;
}

int run(const Options& o) {
  // Every profile's server runs from the start, and each concurrency level runs on all of them in turn
  // (starting with a different one per level): a slow stretch of a shared machine then lands on every
  // profile in turn rather than on whichever profile ran at the time. An idle server costs nothing.
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (const std::string& p : o.profiles) {
    std::string args = "-m " + o.model + " -np " + std::to_string(o.n_slots) + " -c " +
                       std::to_string(o.n_ctx) + profile_args(p, o.draft_max) + " " + o.extra;
    if (o.threads > 0) args += " -t " + std::to_string(o.threads);
    std::fprintf(stderr, "profile %s: mtp serve %s\n", p.c_str(), args.c_str());
    servers.push_back(std::make_unique<ServerProcess>(args));
  }
  Options warm = o;
  warm.rounds = 1;
  for (const auto& srv : servers) run_level(srv->port(), 1, warm);  // first touch, first measurements
  std::map<std::string, std::vector<Level>> results;
  for (size_t li = 0; li < o.levels.size(); ++li) {
    const int c = o.levels[li];
    for (size_t j = 0; j < servers.size(); ++j) {
      const size_t i = (li + j) % servers.size();
      const std::string& p = o.profiles[i];
      Level l = run_level(servers[i]->port(), c, o);
      std::fprintf(stderr, "  c%-2d %-6s %8.2f tok/s%s\n", c, p.c_str(), l.tok_s,
                   l.failures ? "  (FAILED REQUESTS)" : "");
      results[p].resize(o.levels.size());
      results[p][li] = l;
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
    for (const std::string& p : o.profiles) {
      std::printf("| %s |", p.c_str());
      for (size_t i = 0; i < o.levels.size(); ++i) cell(p, i);
      std::printf("\n");
    }
  };
  char title[128];
  std::snprintf(title, sizeof title,
                "Aggregate tok/s (%d-token answers, %d requests per client, -np %d):", o.max_tokens, o.rounds,
                o.n_slots);
  table(title, " tok/s", [&](const std::string& p, size_t i) {
    std::printf(" %.2f%s |", results[p][i].tok_s, results[p][i].failures ? "*" : "");
  });
  if (results.count("off")) {
    table("Relative to MTP off:", "", [&](const std::string& p, size_t i) {
      std::printf(" %+.1f%% |", 100.0 * (results[p][i].tok_s / results["off"][i].tok_s - 1.0));
    });
  }
  table("Draft acceptance (accepted / drafted; - = no drafting):", "", [&](const std::string& p, size_t i) {
    const Level& l = results[p][i];
    l.acceptance < 0 ? std::printf(" - |") : std::printf(" %.3f |", l.acceptance);
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
    } catch (const std::exception& e) {
      std::fprintf(stderr, "server_sweep: %s: %s\n", a.c_str(), e.what());
      return 2;
    }
    std::fprintf(stderr, "usage: server_sweep %s [--extra \"ARGS\"]\n", mtp::bench::kSweepUsage);
    return 2;
  }
  if (o.model.empty()) {
    std::fprintf(stderr, "server_sweep: -m MODEL is required\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server_sweep: %s\n", e.what());
    return 1;
  }
}
