// Rules files in TOML: the same canonical form and sha256 as the JSON file with the same rules (through the
// library and through `mtp gate freeze/run`), and malformed files of either format refused with the line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "gate/gate.h"
#include "test_util.h"

namespace mtp::gate {
namespace {

using mtp::testing::TempDir;

constexpr const char* kJsonRules = R"({"gate": "mtp-on", "inputs": ["model.gguf"], "rules": [
  {"id": "speedup", "metric": "paired_output_rate_ratio", "level": 1, "op": ">=", "threshold": 1.0,
   "statistic": "bootstrap_mean", "confidence": 0.95, "min_samples": 20},
  {"id": "no-failures", "metric": "failure_rate", "op": "<=", "threshold": 0.01, "statistic": "wilson"}]})";

// The same rules, keys in another order, a comment, an inline table for the second rule.
constexpr const char* kTomlRules = R"(# registered before the run
gate = "mtp-on"
inputs = ["model.gguf"]

[[rules]]
statistic = "bootstrap_mean"
id = "speedup"
metric = "paired_output_rate_ratio"
level = 1
op = ">="
threshold = 1.0
confidence = 0.95
min_samples = 20

[[rules]]
id = "no-failures"
metric = "failure_rate"
op = "<="
threshold = 0.01
statistic = "wilson"
)";

std::string toml_error(const std::string& text) {
  auto r = parse_rules_toml(text, "rules.toml");
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(GateRulesToml, SameRulesAsJsonHaveTheSameCanonicalFormAndHash) {
  auto json = parse_rules(kJsonRules, "rules.json");
  auto toml = parse_rules_toml(kTomlRules, "rules.toml");
  ASSERT_TRUE(json.ok()) << json.status().message();
  ASSERT_TRUE(toml.ok()) << toml.status().message();
  EXPECT_EQ(toml->canonical, json->canonical);
  EXPECT_EQ(toml->sha256, json->sha256);
  ASSERT_EQ(toml->rules.size(), 2u);
  EXPECT_EQ(toml->rules[0].level, 1);
  EXPECT_EQ(toml->rules[0].min_samples, 20);
  EXPECT_DOUBLE_EQ(toml->rules[1].threshold, 0.01);
  // A changed value changes the hash, as in JSON.
  std::string edited = kTomlRules;
  edited.replace(edited.find("threshold = 0.01"), 16, "threshold = 0.02");
  auto other = parse_rules_toml(edited, "rules.toml");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->sha256, json->sha256);
}

TEST(GateRulesToml, MalformedFilesNameTheLine) {
  EXPECT_EQ(toml_error("gate = \"g\"\n\n[[rules]]\nid = \"r\"\nthreshold = = 1\n").rfind("rules.toml:5:", 0),
            0u);
  EXPECT_EQ(toml_error("gate = \"g\"\ngate = \"h\"\n").rfind("rules.toml:2:", 0), 0u);
  EXPECT_EQ(toml_error("gate = \"g\"\n[[rules]]\nid = \"r\"\nwhen = 2026-12-05\n"),
            "rules.toml:4:8: a date or time has no JSON form; quote it as a string");
  EXPECT_EQ(toml_error("gate = \"g\"\n[[rules]]\nid = \"r\"\nthreshold = nan\n"),
            "rules.toml:4:13: nan and inf have no JSON form");
  // A well-formed file with a bad rule: the rule's line, then what the JSON form would have said.
  EXPECT_EQ(toml_error("gate = \"g\"\n\n[[rules]]\nid = \"a\"\nmetric = \"tpot_ms\"\nop = \"<=\"\n"
                       "threshold = 1\nstatistic = \"mean\"\n\n[[rules]]\nid = \"b\"\nmetric = \"speed\"\n"
                       "op = \"<=\"\nthreshold = 1\nstatistic = \"mean\"\n")
                .rfind("rules.toml:10: rule 'b': unknown metric 'speed'", 0),
            0u);
  EXPECT_EQ(toml_error("gate = \"g\"\nrules = []\n"), "rules.toml: \"rules\" must be a non-empty array");
}

TEST(GateRulesToml, MalformedJsonNamesTheLineAndColumn) {
  auto r = parse_rules("{\"gate\": \"g\",\n  \"rules\": [\n    {\"id\": \"r\",, }]}", "rules.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("rules.json:3:16: syntax error", 0), 0u) << r.status().message();
}

// `mtp gate` as a user runs it: a TOML file freezes to the hash its JSON twin has, so the JSON file is judged
// under the TOML file's lock; an edited TOML file is refused like an edited JSON one.
TEST(GateRulesToml, FreezeTomlThenRunTheJsonTwinUnderItsLock) {
  TempDir dir;
  std::ofstream(dir.file("model.gguf")) << "weights";
  std::string json_text = kJsonRules, toml_text = kTomlRules;
  const std::string model = dir.file("model.gguf");
  json_text.replace(json_text.find("model.gguf"), 10, model);
  toml_text.replace(toml_text.find("model.gguf"), 10, model);
  std::ofstream(dir.file("rules.toml")) << toml_text;
  std::ofstream(dir.file("rules.json")) << json_text;
  auto frozen = mtp::testing::run_mtp("gate freeze " + dir.file("rules.toml"), true);
  ASSERT_EQ(frozen.exit_code, 0) << frozen.output;
  auto json = parse_rules(json_text, "rules.json");
  ASSERT_TRUE(json.ok());
  EXPECT_NE(frozen.output.find("sha256 " + json->sha256), std::string::npos) << frozen.output;
  auto twin = mtp::testing::run_mtp(
      "gate freeze " + dir.file("rules.json") + " --lock " + dir.file("rules.toml.lock"), true);
  EXPECT_EQ(twin.exit_code, 0) << twin.output;
  EXPECT_NE(twin.output.find("already frozen"), std::string::npos) << twin.output;

  std::ofstream(dir.file("rules.toml")) << toml_text + "\n[[rules]]\nid = \"bad\"\nmetric = \n";
  auto broken = mtp::testing::run_mtp("gate run " + dir.file("rules.toml") + " x.jsonl", true);
  EXPECT_EQ(broken.exit_code, 2) << broken.output;
  EXPECT_NE(broken.output.find("rules.toml:24:"), std::string::npos) << broken.output;
}

}  // namespace
}  // namespace mtp::gate
