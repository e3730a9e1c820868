// Lazy grammars (a tool call under tool_choice "auto"): the output is free until the model opens a call, then
// the call's grammar holds, so its arguments parse and validate (checked by the output parser and the gate's
// schema validator, which share no code with the grammar compiler); without the grammar the same model writes
// a broken call. The model is made to open the call at a chosen place by editing its logits there
// (EngineOptions::edit_logits), the same with and without drafting; everything else is its own choice.
#include <gtest/gtest.h>

#include <memory>
#include <regex>

#include "chat/output_parser.h"
#include "engine_fixtures.h"
#include "gate/schema.h"
#include "server/tool_grammar.h"
#include "speculative/mtp_drafter.h"
#include "tokenizer/tokenizer.h"

namespace mtp::testing {
namespace {

using Json = nlohmann::ordered_json;

const char* kWeather = R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
  "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},
  "required":["city","unit"],"additionalProperties":false})";

Json weather_tools() {
  return Json::array({Json{{"type", "function"},
                           {"function", {{"name", "get_weather"}, {"parameters", Json::parse(kWeather)}}}}});
}

// `tokens` pushed to the top at outputs index `at`, `at` + 1, ...: the model writes them there.
using Pushes = std::vector<std::pair<int64_t, std::vector<int32_t>>>;

struct Fixture {
  Model model;
  Tokenizer tokenizer;
  ThreadPool pool{2};

  static Fixture load() {
    auto m = Model::load(structured_model(GgmlType::Q8_0, 1.75));
    if (!m.ok()) throw std::runtime_error(m.status().message());
    auto t = Tokenizer::create(m->vocab());
    if (!t.ok()) throw std::runtime_error(t.status().message());
    return Fixture{std::move(*m), std::move(*t)};
  }
  std::vector<int32_t> tokens(const std::string& text) const {
    EncodeOptions enc;
    enc.add_bos = false;
    enc.parse_special = true;
    return tokenizer.encode(text, enc);
  }
  std::unique_ptr<Engine> engine(bool spec, Pushes pushes,
                                 speculative::ScriptedDrafter** scripted = nullptr) {
    EngineOptions eo;
    eo.n_ctx = 2048;
    eo.n_batch = 64;
    eo.spec = spec ? SpecType::kMtp : SpecType::kNone;
    eo.draft.n_max = 3;
    eo.end_tokens = default_end_tokens(model.vocab());
    eo.edit_logits = [pushes](int64_t index, std::span<float> logits) {
      for (const auto& [at, ids] : pushes)
        if (index >= at && index < at + static_cast<int64_t>(ids.size()))
          logits[static_cast<size_t>(ids[static_cast<size_t>(index - at)])] += 1000.0f;
    };
    if (scripted)
      eo.make_drafter = [scripted](const Model&, Memory&,
                                   ThreadPool&) -> Expected<std::unique_ptr<speculative::Drafter>> {
        auto d = std::make_unique<speculative::ScriptedDrafter>();
        *scripted = d.get();
        return std::unique_ptr<speculative::Drafter>(std::move(d));
      };
    return make_engine(model, eo, pool);
  }
};

// The tools' lazy grammar in the Hermes JSON syntax, as `mtp serve` builds it under "auto".
RequestOptions lazy_call_options(std::string after = "") {
  server::ToolCallGrammarOptions go;
  go.syntax = chat::ToolCallSyntax::kJson;
  auto gbnf = server::tool_call_gbnf(weather_tools(), "", go);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
  auto g = grammar::parse_gbnf(*gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message();
  RequestOptions ro;
  ro.max_tokens = 300;
  ro.grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  ro.grammar_trigger = RequestOptions::GrammarTrigger{std::string(server::kToolCallOpen), std::move(after)};
  return ro;
}

chat::ParsedOutput parse_reply(const std::string& text, bool starts_in_reasoning = false) {
  chat::OutputFormat format;
  format.tools = weather_tools();
  format.starts_in_reasoning = starts_in_reasoning;
  return chat::parse_output(text, format);
}

// The call's arguments, checked against the tool's schema: "" when they validate, else what is wrong.
std::string call_problem(const chat::ParsedOutput& out) {
  if (out.tool_calls.size() != 1) return "no single tool call";
  const chat::ToolCall& call = out.tool_calls[0];
  if (call.name != "get_weather") return "called " + call.name;
  const Json args = Json::parse(call.arguments, nullptr, false);
  if (!args.is_object()) return "arguments are not an object: " + call.arguments;
  if (args.value("city", std::string()).size() > 12) return "city longer than maxLength";
  return gate::schema_violation(Json::parse(kWeather), args);
}

TEST(LazyGrammar, CallOpenedByTheModelValidatesAndMatchesWithAndWithoutDrafting) {
  Fixture f = Fixture::load();
  const std::vector<int32_t> open = f.tokens(std::string(server::kToolCallOpen));
  ASSERT_GT(open.size(), 1u) << "the trigger should take several tokens here, so it is met part by part";
  for (int64_t at : {0, 6}) {
    const Pushes pushes = {{at, open}};
    auto plain = f.engine(false, pushes);
    auto drafting = f.engine(true, pushes);
    speculative::SpecStats drafted;
    for (uint64_t seed : {0, 1, 2}) {
      RequestOptions ro = lazy_call_options();
      ro.sampling.temperature = seed == 0 ? 0.0f : 0.8f;
      ro.sampling.seed = seed;
      for (const auto& prompt : test_prompts(2, seed + 3)) {
        const Generation a = generate(*plain, prompt, ro);
        const Generation b = generate(*drafting, prompt, ro);
        EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
        drafted.merge(b.timings.spec);
        const std::string text = f.tokenizer.decode(a.tokens);
        EXPECT_EQ(a.finish, FinishReason::kStop) << text;
        EXPECT_EQ(text.find(server::kToolCallOpen),
                  f.tokenizer.decode(std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + at)).size())
            << "the free text before the call is the model's own: " << text;
        EXPECT_TRUE(text.ends_with("</tool_call>")) << text;
        EXPECT_EQ(call_problem(parse_reply(text)), "") << text;

        // The same request without the lazy grammar: the model opens the call and writes no valid one.
        RequestOptions free = ro;
        free.grammar = nullptr;
        free.grammar_trigger.reset();
        const std::string unconstrained = f.tokenizer.decode(generate(*plain, prompt, free).tokens);
        EXPECT_NE(unconstrained.find(server::kToolCallOpen), std::string::npos) << unconstrained;
        EXPECT_NE(call_problem(parse_reply(unconstrained)), "") << unconstrained;
      }
    }
    EXPECT_GT(drafted.drafted, 0) << "drafting never ran, so the comparison shows nothing";
  }
}

// Drafts that carry the trigger itself and the call after it are kept, one wrong token at each draft
// position is rejected, and the output stays the one plain decoding gives.
TEST(LazyGrammar, DraftsThroughTheTriggerAreVerifiedLikeAnyOther) {
  Fixture f = Fixture::load();
  const Pushes pushes = {{4, f.tokens(std::string(server::kToolCallOpen))}};
  auto plain = f.engine(false, pushes);
  speculative::ScriptedDrafter* scripted = nullptr;
  auto drafting = f.engine(true, pushes, &scripted);
  int64_t drafted = 0, accepted = 0;
  const RequestOptions ro = lazy_call_options();
  for (const auto& prompt : test_prompts(3, 11)) {
    const Generation a = generate(*plain, prompt, ro);
    std::vector<int32_t> script = prompt;
    script.insert(script.end(), a.tokens.begin(), a.tokens.end());
    scripted->set_script(0, script, f.tokenizer.n_tokens());
    scripted->set_wrong(0, {-1, 0, -1, 1, 2});  // per round: all right, or one wrong at that position
    const Generation b = generate(*drafting, prompt, ro);
    EXPECT_EQ(a.tokens, b.tokens) << f.tokenizer.decode(a.tokens) << "\n" << f.tokenizer.decode(b.tokens);
    drafted += b.timings.spec.drafted;
    accepted += b.timings.spec.accepted;
  }
  EXPECT_GT(accepted, drafted / 3);
  EXPECT_LT(accepted, drafted);
}

// With `after` (the reasoning's close), a call opened inside the reasoning is free text, and the one after it
// is held to the grammar.
TEST(LazyGrammar, TriggerCountsOnlyAfterItsMarker) {
  Fixture f = Fixture::load();
  const std::vector<int32_t> open = f.tokens(std::string(server::kToolCallOpen));
  const std::vector<int32_t> close = f.tokens(std::string(server::kReasoningClose));
  const int64_t second = 3 + static_cast<int64_t>(open.size()) + 4;
  auto plain =
      f.engine(false, {{3, open}, {second, close}, {second + static_cast<int64_t>(close.size()), open}});
  const RequestOptions ro = lazy_call_options(std::string(server::kReasoningClose));
  const std::string text = f.tokenizer.decode(generate(*plain, test_prompts(1, 5)[0], ro).tokens);
  const size_t end_of_reasoning = text.find(server::kReasoningClose);
  ASSERT_NE(end_of_reasoning, std::string::npos) << text;
  EXPECT_LT(text.find(server::kToolCallOpen), end_of_reasoning) << text;
  const chat::ParsedOutput out = parse_reply(text, true);
  EXPECT_NE(out.reasoning_content.find(server::kToolCallOpen), std::string::npos) << text;
  EXPECT_EQ(call_problem(out), "") << text;
}

// A token that would complete the trigger with bytes the grammar refuses is drawn again: here the model is
// pushed to write "<" then "to" under the trigger "<t" and a grammar of "<ta" and three letters, so "to" is
// refused there, and what comes instead is free text or the grammar's, with drafting on and off alike.
TEST(LazyGrammar, TokenThatFiresTheTriggerWronglyIsDrawnAgain) {
  Fixture f = Fixture::load();
  const std::vector<int32_t> lt = f.tokens("<"), to = f.tokens("to");
  ASSERT_EQ(to.size(), 1u) << "the test needs \"to\" to be one token";
  RequestOptions ro;
  ro.max_tokens = 40;
  ro.grammar = std::make_shared<const grammar::Grammar>(*grammar::parse_gbnf("root ::= \"<ta\" [a-z]{3}"));
  ro.grammar_trigger = RequestOptions::GrammarTrigger{"<t", ""};
  const Pushes pushes = {{2, {lt[0], to[0]}}};
  auto plain = f.engine(false, pushes);
  auto drafting = f.engine(true, pushes);
  for (const auto& prompt : test_prompts(3, 21)) {
    const Generation a = generate(*plain, prompt, ro);
    EXPECT_EQ(a.tokens, generate(*drafting, prompt, ro).tokens);
    const std::string text = f.tokenizer.decode(a.tokens);
    EXPECT_EQ(text.find("<to"), std::string::npos) << text;
    if (const size_t at = text.find("<t"); at != std::string::npos) {
      EXPECT_TRUE(std::regex_match(text.substr(at), std::regex("<ta[a-z]{3}"))) << text;
    }
  }
}

}  // namespace
}  // namespace mtp::testing
