// The tool-call probe: the schema validator keyword by keyword, the markup scan, the scenarios file's
// refusals, and whole probes against an in-process scripted server that answers well (must pass) or leaks
// markup, breaks the schema, or stops instead of calling (each must fail with its reason), then judged by
// gate rules.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <mutex>
#include <thread>

#include "cli_util.h"
#include "gate/gate.h"
#include "gate/schema.h"
#include "gate/tool_probe.h"
#include "rules_fixture.h"
#include "test_util.h"

namespace mtp::gate {
namespace {

using mtp::gate::testing::valid;
using mtp::testing::TempDir;

TEST(ToolSchema, EachKeywordAcceptsAndRejects) {
  EXPECT_TRUE(valid(R"({"type": "string"})", R"("x")"));
  EXPECT_FALSE(valid(R"({"type": "string"})", "1"));
  EXPECT_TRUE(valid(R"({"type": "integer"})", "3"));
  EXPECT_TRUE(valid(R"({"type": "integer"})", "3.0"));
  EXPECT_FALSE(valid(R"({"type": "integer"})", "3.5"));
  EXPECT_TRUE(valid(R"({"type": "number"})", "3.5"));
  EXPECT_FALSE(valid(R"({"type": "boolean"})", "0"));
  EXPECT_TRUE(valid(R"({"type": ["string", "null"]})", "null"));
  EXPECT_FALSE(valid(R"({"type": ["string", "null"]})", "[]"));
  EXPECT_TRUE(valid(R"({"enum": ["a", "b"]})", R"("b")"));
  EXPECT_FALSE(valid(R"({"enum": ["a", "b"]})", R"("c")"));
  const char* object = R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})";
  EXPECT_TRUE(valid(object, R"({"n": 1, "other": true})"));
  EXPECT_FALSE(valid(object, R"({"other": true})"));
  EXPECT_FALSE(valid(object, R"({"n": "1"})"));
  const char* closed = R"({"type": "object", "properties": {"n": {}}, "additionalProperties": false})";
  EXPECT_TRUE(valid(closed, R"({"n": 1})"));
  EXPECT_FALSE(valid(closed, R"({"n": 1, "m": 2})"));
  const char* typed_extra = R"({"type": "object", "additionalProperties": {"type": "string"}})";
  EXPECT_TRUE(valid(typed_extra, R"({"a": "x"})"));
  EXPECT_FALSE(valid(typed_extra, R"({"a": 1})"));
  const char* list = R"({"type": "array", "items": {"type": "string", "enum": ["x", "y"]}})";
  EXPECT_TRUE(valid(list, R"(["x", "y"])"));
  EXPECT_FALSE(valid(list, R"(["x", "z"])"));
  EXPECT_EQ(
      schema_violation(
          Json::parse(
              R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}})"),
          Json::parse(R"({"a": [1, "two"]})")),
      R"($.a[1]: "two" is not of type "integer")");
}

TEST(ToolProbe, MarkupScanFindsTagsAndSpecialTokens) {
  EXPECT_TRUE(markup_in("The weather in Paris is 18 C. a<b, c|>d").empty());
  EXPECT_EQ(markup_in("<think>x</think> ok <|im_end|>"),
            (std::vector<std::string>{"<think>", "</think>", "<|im_end|>"}));
  EXPECT_EQ(markup_in("<tool_call>{}</tool_call><tool_call>"),
            (std::vector<std::string>{"<tool_call>", "<tool_call>", "</tool_call>"}));
}

TEST(ToolProbe, ScenariosFileRefusalsNameTheScenarioAndTurn) {
  EXPECT_EQ(builtin_tool_scenarios().size(), 3u);
  auto error = [](const std::string& text) {
    auto s = parse_tool_scenarios(text, "s.json");
    return s.ok() ? std::string("accepted") : s.status().message();
  };
  EXPECT_EQ(error("{"), "s.json: not valid JSON");
  EXPECT_EQ(error(R"({"scenarios": []})"), "s.json: needs {\"scenarios\": [...]} with at least one scenario");
  const std::string head =
      R"({"scenarios": [{"name": "w", "tools": [{"type": "function", "function": {"name": "f"}}],
      "messages": [{"role": "user", "content": "hi"}], "turns": )";
  EXPECT_EQ(error(head + R"([{"expect": {"function": "g"}, "result": "x"}]}]})"),
            "s.json: scenario 1 'w': turn 1 expects 'g', which no tool defines");
  EXPECT_EQ(error(head + R"([{"expect": {"function": "f"}}]}]})"),
            "s.json: scenario 1 'w': turn 1: a turn that expects a call needs \"result\" (the tool's reply, "
            "a string)");
  EXPECT_EQ(
      error(head + R"([{"expect": {"function": "f", "arguments": {}}, "result": "x"}, {"expect": null}]}]})"),
      "accepted");
}

enum class Script { kGood, kLeak, kBadArguments, kStop };

// A chat server that plays the weather scenario: after a user message it calls get_weather for the city
// named last, after a tool message it answers in text; `script` decides how it misbehaves.
class ScriptedToolServer {
 public:
  explicit ScriptedToolServer(Script script) : script_(script) {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const Json body = Json::parse(req.body);
      {
        std::lock_guard<std::mutex> lock(mu_);
        bodies_.push_back(body);
      }
      res.set_content(answer(body).dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ScriptedToolServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  Json answer(const Json& body) const {
    const Json& last = body["messages"].back();
    Json message = {{"role", "assistant"}, {"content", "It is 18 degrees and cloudy."}};
    std::string finish = "stop";
    if (last["role"] == "user") {
      const std::string city =
          last["content"].get<std::string>().find("Tokyo") != std::string::npos ? "Tokyo" : "Paris";
      const Json args =
          script_ == Script::kBadArguments ? Json{{"city", city}, {"unit", "kelvin"}} : Json{{"city", city}};
      message["content"] = script_ == Script::kLeak ? "<tool_call>" : "";
      message["tool_calls"] =
          Json::array({{{"id", "call_" + city},
                        {"type", "function"},
                        {"function", {{"name", "get_weather"}, {"arguments", args.dump()}}}}});
      finish = script_ == Script::kStop ? "stop" : "tool_calls";
    }
    return {{"object", "chat.completion"},
            {"choices", Json::array({{{"index", 0}, {"message", message}, {"finish_reason", finish}}})}};
  }

  Script script_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<Json> bodies_;
};

std::vector<ToolScenario> weather_only() {
  std::vector<ToolScenario> all = builtin_tool_scenarios();
  return {all[0]};
}

std::vector<ToolRun> probe(ScriptedToolServer& server, const std::string& out, int concurrency = 1) {
  ToolProbeOptions o;
  o.url = server.url();
  o.reference_body = {{"speculative", false}};
  o.scenarios = weather_only();
  o.repeat = 2;
  o.concurrency = concurrency;
  auto runs = run_tool_probe(o, out);
  EXPECT_TRUE(runs.ok()) << runs.status().message();
  return runs.ok() ? *runs : std::vector<ToolRun>{};
}

TEST(ToolProbe, WellFormedCallsPassOnBothSidesUnderConcurrency) {
  TempDir dir;
  ScriptedToolServer server(Script::kGood);
  const std::vector<ToolRun> runs = probe(server, dir.file("p.jsonl"), 3);
  ASSERT_EQ(runs.size(), 4u);  // 2 repeats x (target, reference)
  for (const ToolRun& r : runs)
    EXPECT_TRUE(r.pass) << r.side << ": " << (r.reasons.empty() ? "" : r.reasons[0]);
  // Three turns per conversation; the reference's requests carry the body, the target's do not; the tool
  // result goes back with the call's id.
  const std::vector<Json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 12u);
  int reference = 0;
  for (const Json& b : bodies) reference += b.contains("speculative") && b["speculative"] == false ? 1 : 0;
  EXPECT_EQ(reference, 6);
  bool tool_message = false;
  for (const Json& b : bodies)
    for (const Json& m : b["messages"])
      tool_message |= m["role"] == "tool" && m["tool_call_id"] == "call_Paris" &&
                      m["content"].get<std::string>().find("18") != std::string::npos;
  EXPECT_TRUE(tool_message);
}

std::string first_reason(const std::vector<ToolRun>& runs) {
  for (const ToolRun& r : runs) EXPECT_FALSE(r.pass) << r.side;
  return runs.empty() || runs[0].reasons.empty() ? "" : runs[0].reasons[0];
}

TEST(ToolProbe, LeakedMarkupFailsWithTheReason) {
  TempDir dir;
  ScriptedToolServer server(Script::kLeak);
  const std::vector<ToolRun> runs = probe(server, dir.file("p.jsonl"));
  EXPECT_EQ(first_reason(runs), "turn 1: content leaks markup: <tool_call>");
  EXPECT_EQ(runs[0].leaks, 1);
}

TEST(ToolProbe, ArgumentsOutsideTheSchemaFail) {
  TempDir dir;
  ScriptedToolServer server(Script::kBadArguments);
  EXPECT_EQ(
      first_reason(probe(server, dir.file("p.jsonl"))),
      R"(turn 1: the arguments of 'get_weather' violate its schema: $.unit: "kelvin" is not one of ["celsius","fahrenheit"])");
}

TEST(ToolProbe, StopInsteadOfToolCallsFails) {
  TempDir dir;
  ScriptedToolServer server(Script::kStop);
  EXPECT_EQ(first_reason(probe(server, dir.file("p.jsonl"))),
            "turn 1: finish_reason is 'stop', expected 'tool_calls'");
}

// `mtp gate probe tools` as a user runs it, then `mtp gate` rules on the files: the good server passes both
// rules, the leaking one fails both.
TEST(ToolProbe, CliWritesAProbeFileTheGateJudges) {
  TempDir dir;
  const Rules rules = *parse_rules(R"({"gate": "g", "rules": [
    {"id": "calls", "metric": "tool_call_pass_rate", "op": ">=", "threshold": 0.5, "statistic": "wilson", "min_samples": 8},
    {"id": "leaks", "metric": "markup_leaks", "op": "<=", "threshold": 0, "statistic": "count"}]})",
                                   "rules.json");
  const Lock lock{rules.sha256, "2026-01-01T00:00:00Z", {}};
  for (Script script : {Script::kGood, Script::kLeak}) {
    ScriptedToolServer server(script);
    const std::string out = dir.file(script == Script::kGood ? "good.jsonl" : "leak.jsonl");
    auto r = mtp::testing::run_mtp(
        "gate probe tools --url " + server.url() +
            " --reference-body '{\"speculative\": false}' --repeat 4 --concurrency 2 -o " + out,
        true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto v = judge(rules, lock, {out});
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ((*v)[0].samples, 24);  // 4 repeats x 2 sides x 3 scenarios
    const bool good = script == Script::kGood;
    EXPECT_NE(
        r.output.find(good ? "24 conversations: target 4/12 passed, reference 4/12 passed, 0 markup leaks"
                           : "24 conversations: target 0/12 passed, reference 0/12 passed, 24 markup leaks"),
        std::string::npos)
        << r.output;
    EXPECT_FALSE((*v)[0].pass);  // only the weather scenario is one this server plays
    EXPECT_EQ((*v)[1].pass, good) << (*v)[1].why;
  }
  auto missing =
      mtp::testing::run_mtp("gate probe tools --url http://127.0.0.1:1 -o " + dir.file("x.jsonl"), true);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
}

TEST(ToolProbe, RulesPairCountWithMarkupLeaksAndWilsonWithThePassRate) {
  auto error = [](const std::string& metric, const std::string& statistic) {
    auto r = parse_rules(R"({"gate": "g", "rules": [{"id": "r", "metric": ")" + metric +
                             R"(", "op": "<=", "threshold": 0, "statistic": ")" + statistic + R"("}]})",
                         "rules.json");
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_EQ(error("markup_leaks", "count"), "accepted");
  EXPECT_EQ(error("tool_call_pass_rate", "wilson"), "accepted");
  EXPECT_EQ(
      error("markup_leaks", "wilson"),
      "rules.json: rule 'r': statistic 'wilson' does not apply to metric 'markup_leaks' (it takes count)");
  EXPECT_EQ(
      error("tool_call_pass_rate", "count"),
      "rules.json: rule 'r': statistic 'count' does not apply to metric 'tool_call_pass_rate' (it takes "
      "wilson)");
  EXPECT_EQ(
      error("ttft_ms", "count"),
      "rules.json: rule 'r': statistic 'count' does not apply to metric 'ttft_ms' (it takes mean, median, "
      "bootstrap_mean or bootstrap_median)");
  EXPECT_EQ(error("kld_mean", "count"),
            "rules.json: rule 'r': statistic 'count' does not apply to metric 'kld_mean' (it takes value or "
            "normal)");
}

TEST(ToolProbe, AMalformedProbeFileLineIsRefusedWithItsLine) {
  TempDir dir;
  const std::string path = dir.file("t.jsonl");
  std::ofstream(path)
      << R"({"type": "header", "tool": "mtp gate probe tools", "start_utc": "2026-06-01T00:00:00Z"})"
      << "\n"
      << R"({"type": "tool_run", "side": "target", "pass": true, "leaks": 0})"
      << "\n"
      << R"({"type": "tool_run", "side": "target", "pass": "yes", "leaks": 0})"
      << "\n";
  ASSERT_TRUE(is_tool_probe_file(path));
  auto f = read_tool_probe_file(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), path + R"(:3: a tool_run line needs "pass", "leaks" and "side")");
}

}  // namespace
}  // namespace mtp::gate
