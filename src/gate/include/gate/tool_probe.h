// `mtp gate probe tools`: multi-turn conversations with `tools` and scripted tool results, with speculation
// on (the target) and off (the reference), each scenario `repeat` times, `concurrency` conversations at a
// time (a scenario's target and reference conversations side by side). Every model turn is checked: the
// response parses, a call is made where one is expected and ends with finish_reason "tool_calls", each call's
// arguments parse and validate against the tool's schema and carry the expected values, and `content` holds
// no chat markup (docs/gate.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gate/gate.h"

namespace mtp::gate {

// One model turn of a scenario. `function` empty: the model should answer in text (no call).
struct ToolTurn {
  std::string user;  // a user message appended before this turn ("" = none)
  std::string function;
  Json arguments = Json::object();  // required values: each key must be present and equal
  std::string result;               // the scripted tool result sent back for each call of this turn
};

struct ToolScenario {
  std::string name;
  Json tools = Json::array();     // OpenAI `tools`
  Json messages = Json::array();  // the conversation before the first turn
  std::vector<ToolTurn> turns;
};

// The built-in scenarios (weather, calculator, search) and a scenarios file's: {"scenarios": [{"name",
// "tools", "messages", "turns": [{"user"?, "expect": {"function", "arguments"} | null, "result"?}]}]}.
std::vector<ToolScenario> builtin_tool_scenarios();
Expected<std::vector<ToolScenario>> parse_tool_scenarios(const std::string& text, const std::string& source);
Expected<std::vector<ToolScenario>> read_tool_scenarios(const std::string& path);

// The problems of one model turn (empty: it passes) and how many markup leaks its content had.
struct TurnCheck {
  std::vector<std::string> reasons;
  int64_t leaks = 0;
};
TurnCheck check_tool_turn(const ToolScenario& scenario, const ToolTurn& turn, const Json& response);

// The markup tokens found in `content` (<tool_call>, </tool_call>, <think>, </think>, <|...|>).
std::vector<std::string> markup_in(const std::string& content);

struct ToolProbeOptions {
  std::string url;
  std::string reference_url;  // empty: `url` with `reference_body` merged in
  Json reference_body = Json::object();
  std::string api_key, model;
  std::vector<ToolScenario> scenarios;
  int repeat = 3;
  int concurrency = 1;
  int max_tokens = 256;
  double timeout_s = 600;
};

// One conversation: a scenario on one side ("target" or "reference") in one repeat.
struct ToolRun {
  std::string scenario, side;
  int repeat = 0;
  bool pass = false;
  int64_t leaks = 0;
  std::vector<std::string> reasons;  // "turn N: why" for every failed check
  int concurrency = 1;               // the probe's concurrency (a rule's "level" selects it)
};

// Runs every conversation and writes a header line ("tool": "mtp gate probe tools", "start_utc") and one
// "tool_run" line per conversation to `out_path`; fails only when the file cannot be written.
Expected<std::vector<ToolRun>> run_tool_probe(const ToolProbeOptions& o, const std::string& out_path);

bool is_tool_probe_file(const std::string& path);
struct ToolProbeFile {
  std::string start_utc;
  std::vector<ToolRun> runs;
};
Expected<ToolProbeFile> read_tool_probe_file(const std::string& path);

}  // namespace mtp::gate
