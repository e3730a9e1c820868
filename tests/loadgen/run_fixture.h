// Test helpers: short bench options, temporary files, and a hand-written run file whose figures are
// computable by hand (report_test.cpp states them), for the report tests and the `mtp report` command tests.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/status.h"
#include "loadgen/replay.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"

namespace mtp::loadgen {

// Options for a short run: one warm-up and `requests` measured requests per level, 10 s timeout.
inline BenchOptions bench_options(const std::string& url, std::vector<int> levels, int requests,
                                  int prompt_tokens, int max_tokens) {
  BenchOptions o;
  o.client.url = url;
  o.client.timeout_s = 10;
  o.levels = std::move(levels);
  o.requests = requests;
  o.warmup = 1;
  o.prompt_tokens = prompt_tokens;
  o.max_tokens = max_tokens;
  o.tool_version = "test";
  return o;
}

// Replay options for the fake server at `url`.
inline ReplayOptions replay_options(const std::string& url) {
  ReplayOptions o;
  o.client.url = url;
  o.client.timeout_s = 30;
  o.tool_version = "test";
  return o;
}

inline constexpr char kFixtureHeader[] = R"({"type":"header","tool":"mtp bench","url":"http://x"})"
                                         "\n";

inline std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "." + std::to_string(getpid()) + ".jsonl")).string();
  std::ofstream(path) << text;
  return path;
}

// The JSON lines of a file (a run file or a recorded trace), in order; Json::parse throws on a torn line.
inline std::vector<Json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
  return out;
}

// Runs `run(writer)` (a bench or a replay) into a temporary run file and reads the file back; an empty run,
// with the test failed, when either step fails.
template <typename Run>
RunData run_to_file(const std::string& name, Run&& run) {
  const std::string path = write_temp(name, "");
  {
    auto out = JsonlWriter::open(path);
    EXPECT_TRUE(out.ok());
    if (!out.ok()) return {};
    const Status s = run(**out);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  auto data = read_run(path);
  EXPECT_TRUE(data.ok()) << data.status().message();
  std::filesystem::remove(path);
  return data.ok() ? *data : RunData{};
}

// A request line; times in ms (written as ns), first_token -1 for none.
inline std::string req(int id, int level, int worker, bool warmup, int sched, int sent, int first, int end,
                       int completion, bool ok, const std::string& timings = "null") {
  auto ns = [](int ms) { return ms < 0 ? std::string("null") : std::to_string(int64_t{ms} * 1'000'000); };
  return str_cat(R"({"type":"request","id":)", id, R"(,"level":)", level, R"(,"worker":)", worker,
                 R"(,"warmup":)", warmup ? "true" : "false", R"(,"scheduled_ns":)", ns(sched),
                 R"(,"sent_ns":)", ns(sent), R"(,"first_token_ns":)", ns(first), R"(,"end_ns":)", ns(end),
                 R"(,"prompt_tokens":10,"completion_tokens":)", completion,
                 R"(,"token_source":"chars","ok":)", ok ? "true" : "false", R"(,"error":)",
                 ok ? "null" : R"("HTTP 500: x")", R"(,"http_status":200,"timings":)", timings, "}\n");
}

inline std::string ev(int id, int t_ms, int tokens) {
  return str_cat(R"({"type":"event","req":)", id, R"(,"t_ns":)", int64_t{t_ms} * 1'000'000, R"(,"tokens":)",
                 tokens, R"(,"kind":")", tokens > 0 ? "content" : "empty", "\"}\n");
}

// Level 1 (one worker): a warm-up with outlandish figures, three measured requests, one failure.
// Level 2 (two workers): to check the steady-state window.
inline std::string fixture() {
  std::string s = kFixtureHeader;
  s += ev(1, 500, 100) + req(1, 1, 0, true, 0, 0, 500, 1000, 100, true);
  s += ev(2, 1000, 0) + ev(2, 1010, 1) + ev(2, 1020, 2) + ev(2, 1040, 1);
  s += req(2, 1, 0, false, 1000, 1000, 1010, 1040, 4, true,
           R"({"draft_n":4,"draft_n_accepted":2,"draft_rounds":2,"acceptance_per_position":[0.5,0.5]})");
  s += ev(3, 1062, 1) + ev(3, 1072, 1) + ev(3, 1092, 1);
  s += req(3, 1, 0, false, 1040, 1042, 1062, 1092, 3, true,
           R"({"draft_n":2,"draft_n_accepted":2,"draft_rounds":1,"acceptance_per_position":[1.0,1.0]})");
  s += ev(4, 1193, 1) + ev(4, 1123, 1);  // out of order in the file: sorted by time
  s += req(4, 1, 0, false, 1092, 1093, 1123, 1193, 2, true);
  s += req(5, 1, 0, false, 1193, 1193, -1, 1200, 0, false);
  s += ev(10, 2020, 2) + ev(10, 2100, 2) + req(10, 2, 0, false, 2000, 2000, 2020, 2100, 4, true);
  s += ev(11, 2060, 1) + ev(11, 2150, 3) + ev(11, 2250, 1) +
       req(11, 2, 1, false, 2050, 2050, 2060, 2250, 5, true);
  s += ev(12, 2150, 1) + ev(12, 2240, 4) + ev(12, 2300, 1) +
       req(12, 2, 0, false, 2100, 2100, 2150, 2300, 6, true);
  return s;
}

}  // namespace mtp::loadgen
