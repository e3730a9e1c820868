// Structured output in the engine: outputs under a JSON Schema parse and validate (checked by the gate's
// schema validator, which shares no code with the grammar compiler), greedy and seeded outputs are the same
// with MTP drafting on and off, a GBNF grammar's language is all that comes out, and a pathological grammar
// ends its request with an error instead of stalling the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <regex>

#include "engine_fixtures.h"
#include "gate/schema.h"
#include "grammar/json_schema.h"
#include "speculative/mtp_drafter.h"
#include "tokenizer/tokenizer.h"

namespace mtp::testing {
namespace {

using Json = nlohmann::ordered_json;

const char* kSchema = R"({"type":"object","properties":{
  "unit":{"enum":["celsius","fahrenheit"]},
  "ok":{"type":"boolean"},
  "days":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3},
  "note":{"type":"string","maxLength":12}},
  "required":["unit","ok"],"additionalProperties":false})";

std::shared_ptr<const grammar::Grammar> compile(const std::string& gbnf) {
  auto g = grammar::parse_gbnf(gbnf);
  if (!g.ok()) throw std::runtime_error(g.status().message());
  return std::make_shared<const grammar::Grammar>(std::move(*g));
}

struct Fixture {
  Model model;
  Tokenizer tokenizer;
  ThreadPool pool{2};

  static Fixture load(double noise = 1.75) {
    auto m = Model::load(structured_model(GgmlType::Q8_0, noise));
    if (!m.ok()) throw std::runtime_error(m.status().message());
    auto t = Tokenizer::create(m->vocab());
    if (!t.ok()) throw std::runtime_error(t.status().message());
    return Fixture{std::move(*m), std::move(*t)};
  }
  std::unique_ptr<Engine> engine(bool spec, int32_t n_max = 3,
                                 speculative::ScriptedDrafter** scripted = nullptr) {
    EngineOptions eo;
    eo.n_ctx = 2048;
    eo.n_batch = 64;
    eo.spec = spec ? SpecType::kMtp : SpecType::kNone;
    eo.draft.n_max = n_max;
    eo.end_tokens = default_end_tokens(model.vocab());
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

TEST(GrammarEngine, SchemaOutputsParseValidateAndMatchWithAndWithoutDrafting) {
  Fixture f = Fixture::load();
  const Json schema = Json::parse(kSchema);
  auto gbnf = grammar::json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  RequestOptions ro;
  ro.max_tokens = 400;
  ro.grammar = compile(*gbnf);
  auto plain = f.engine(false);
  auto drafting = f.engine(true);
  speculative::SpecStats drafted;
  int outputs = 0;
  for (uint64_t seed : {0, 1, 2, 3}) {
    ro.sampling.temperature = seed == 0 ? 0.0f : 0.8f;  // greedy once, then seeded sampling
    ro.sampling.seed = seed;
    for (const auto& prompt : test_prompts(3, seed + 1)) {
      const Generation a = generate(*plain, prompt, ro);
      const Generation b = generate(*drafting, prompt, ro);
      EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
      drafted.merge(b.timings.spec);
      ASSERT_EQ(a.finish, FinishReason::kStop) << "seed " << seed;
      const std::string text = f.tokenizer.decode(a.tokens);
      const Json value = Json::parse(text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << text;
      EXPECT_EQ(gate::schema_violation(schema, value), "") << text;
      // The validator's subset leaves out maxItems and maxLength.
      EXPECT_LE(value.value("tags", Json::array()).size(), 3u) << text;
      EXPECT_LE(value.value("note", std::string()).size(), 12u) << text;
      ++outputs;
    }
  }
  EXPECT_EQ(outputs, 12);
  EXPECT_GT(drafted.drafted, 0) << "drafting never ran, so the comparison shows nothing";
}

// Drafts that follow the grammar's path are accepted, so verify rows past the first are sampled under the
// mask too; a wrong token at each draft position in turn is rejected and the grammar state goes back with it.
TEST(GrammarEngine, AcceptedAndRejectedDraftsAlongTheGrammarPath) {
  Fixture f = Fixture::load();
  RequestOptions ro;
  ro.max_tokens = 400;
  ro.grammar = compile(*grammar::json_schema_to_gbnf(Json::parse(kSchema)));
  auto plain = f.engine(false);
  speculative::ScriptedDrafter* scripted = nullptr;
  auto drafting = f.engine(true, 3, &scripted);
  int64_t drafted = 0, accepted = 0;
  for (uint64_t seed : {0, 5}) {
    ro.sampling.temperature = seed == 0 ? 0.0f : 0.8f;
    ro.sampling.seed = seed;
    for (const auto& prompt : test_prompts(3, seed + 7)) {
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
  }
  EXPECT_GT(accepted, drafted / 3);
  EXPECT_LT(accepted, drafted);
}

// The draft head picks among the tokens the grammar allows (from a copy of the slot's grammar state advanced
// along its draft), so on a model whose head agrees with its trunk most drafts are kept; unmasked, the head
// proposes the chain's next token, which a JSON grammar mostly refuses.
TEST(GrammarEngine, DraftHeadChoosesAmongAllowedTokens) {
  Fixture f = Fixture::load(0.5);
  RequestOptions ro;
  ro.max_tokens = 200;
  ro.grammar = compile(*grammar::json_schema_to_gbnf(Json::parse(kSchema)));
  auto plain = f.engine(false);
  auto drafting = f.engine(true, 3);
  speculative::SpecStats spec;
  int64_t generated = 0;
  for (const auto& prompt : test_prompts(4, 11)) {
    const Generation a = generate(*plain, prompt, ro);
    const Generation b = generate(*drafting, prompt, ro);
    EXPECT_EQ(a.tokens, b.tokens);
    spec.merge(b.timings.spec);
    generated += static_cast<int64_t>(b.tokens.size());
  }
  // Measured: 122 of 186 tokens came from accepted drafts (176 drafted); 0 with the head unmasked.
  EXPECT_GT(spec.accepted, generated / 2) << spec.drafted << " drafted";
}

// The same over a vocabulary-subset draft head: its logits are over the subset's ids, masked by id.
TEST(GrammarEngine, SubsetDraftHeadChoosesAmongAllowedTokens) {
  Fixture f = Fixture::load(0.5);
  RequestOptions ro;
  ro.max_tokens = 200;
  ro.grammar = compile(*grammar::json_schema_to_gbnf(Json::parse(kSchema)));
  EngineOptions eo;
  eo.n_ctx = 2048;
  eo.spec = SpecType::kMtp;
  // A subset whose ids are not 0..n-1 (the last 400 ids), so a subset row's index is not its token id.
  TempDir dir;
  std::vector<int32_t> ranked(static_cast<size_t>(f.model.config().n_vocab));
  for (size_t i = 0; i < ranked.size(); ++i) ranked[i] = static_cast<int32_t>(ranked.size() - 1 - i);
  eo.draft_vocab_file = dir.file("subset.bin");
  ASSERT_TRUE(
      speculative::write_draft_vocab_file(eo.draft_vocab_file, ranked, f.model.config().n_vocab).ok());
  eo.draft_vocab = 400;
  eo.end_tokens = default_end_tokens(f.model.vocab());
  auto subset = make_engine(f.model, eo, f.pool);
  auto plain = f.engine(false);
  speculative::SpecStats spec;
  int64_t generated = 0;
  for (const auto& prompt : test_prompts(4, 11)) {
    const Generation a = generate(*plain, prompt, ro);
    const Generation b = generate(*subset, prompt, ro);
    EXPECT_EQ(a.tokens, b.tokens);
    spec.merge(b.timings.spec);
    generated += static_cast<int64_t>(b.tokens.size());
  }
  // Measured: 53 of 186 tokens from accepted drafts (203 drafted; the subset lacks the lowest ids); 0 with
  // the subset's rows masked by their index instead of their id.
  EXPECT_GT(spec.accepted, generated / 5)
      << spec.drafted << " drafted, " << spec.accepted << " accepted of " << generated;
}

// A draft the grammar refuses is cut before verification (it could only be rejected there).
TEST(GrammarEngine, DraftsTheGrammarRefusesAreCut) {
  Fixture f = Fixture::load();
  RequestOptions ro;
  ro.max_tokens = 30;
  ro.grammar = compile("root ::= [0-9]{20}");
  speculative::ScriptedDrafter* scripted = nullptr;
  auto drafting = f.engine(true, 3, &scripted);
  const auto prompt = test_prompts(1)[0];
  std::vector<int32_t> script = prompt;
  const int32_t letter =
      f.tokenizer.encode("a", {.parse_special = false, .add_bos = false, .add_eos = false})[0];
  script.resize(prompt.size() + 40, letter);  // letters where digits must come
  scripted->set_script(0, script, f.tokenizer.n_tokens());
  const Generation g = generate(*drafting, prompt, ro);
  EXPECT_TRUE(std::regex_match(f.tokenizer.decode(g.tokens), std::regex("[0-9]{20}")));
  EXPECT_EQ(g.timings.spec.drafted, 0);
}

// The vocabulary's trie is built once: at create() when asked (as `mtp serve` does), else at the first
// request with a grammar; later grammar requests use it.
TEST(GrammarEngine, VocabularyTrieIsBuiltOnce) {
  Fixture f = Fixture::load();
  RequestOptions ro;
  ro.max_tokens = 8;
  ro.grammar = compile(R"(root ::= [0-9]+)");
  auto lazy = f.engine(false);
  EXPECT_EQ(lazy->grammar_vocab_builds(), 0);
  generate(*lazy, test_prompts(1)[0], RequestOptions{});
  EXPECT_EQ(lazy->grammar_vocab_builds(), 0);
  for (int i = 0; i < 2; ++i) {
    generate(*lazy, test_prompts(1)[0], ro);
    EXPECT_EQ(lazy->grammar_vocab_builds(), 1);
  }
  EngineOptions eo;
  eo.end_tokens = default_end_tokens(f.model.vocab());
  eo.prepare_grammar = true;
  auto ready = make_engine(f.model, eo, f.pool);
  EXPECT_EQ(ready->grammar_vocab_builds(), 1);
  for (int i = 0; i < 2; ++i) {
    const Generation g = generate(*ready, test_prompts(1)[0], ro);
    EXPECT_TRUE(std::regex_match(f.tokenizer.decode(g.tokens), std::regex("[0-9]+")));
    EXPECT_EQ(ready->grammar_vocab_builds(), 1);
  }
}

TEST(GrammarEngine, GbnfLanguageIsAllThatComesOut) {
  Fixture f = Fixture::load();
  RequestOptions ro;
  ro.max_tokens = 50;
  ro.grammar = compile(R"(root ::= ("yes" | "no") ", " [0-9]{2} "!")");
  auto engine = f.engine(true);
  for (const auto& prompt : test_prompts(4)) {
    const Generation g = generate(*engine, prompt, ro);
    EXPECT_EQ(g.finish, FinishReason::kStop);
    const std::string text = f.tokenizer.decode(g.tokens);
    EXPECT_TRUE(std::regex_match(text, std::regex("(yes|no), [0-9]{2}!"))) << text;
  }
}

TEST(GrammarEngine, PathologicalGrammarEndsTheRequestWithAnError) {
  Fixture f = Fixture::load();
  RequestOptions ro;
  ro.max_tokens = 200;
  // Each "a" doubles the distinct stacks; a strong bias keeps choosing "a" until the matcher's bound.
  ro.grammar = compile(R"(root ::= "a" root "b" | "a" root "c" | "d")");
  const std::vector<int32_t> a =
      f.tokenizer.encode("a", {.parse_special = false, .add_bos = false, .add_eos = false});
  ASSERT_EQ(a.size(), 1u);
  ro.sampling.logit_bias = {{a[0], 100.0f}};
  auto engine = f.engine(false);
  const Generation g = generate(*engine, test_prompts(1)[0], ro);
  EXPECT_EQ(g.finish, FinishReason::kError);
  EXPECT_GT(g.tokens.size(), 8u);
  EXPECT_LT(g.tokens.size(), 200u);
  // The engine goes on serving.
  ro.grammar = compile(R"(root ::= "d")");
  EXPECT_EQ(f.tokenizer.decode(generate(*engine, test_prompts(1)[0], ro).tokens), "d");
}

TEST(GrammarEngine, RequestFailsWhenTheGrammarCannotBeMet) {
  Fixture f = Fixture::load();
  RequestOptions ro;
  ro.grammar = compile(R"(root ::= "x" "y")");
  // Every token that could start the output is forbidden.
  for (int32_t id = 0; id < f.tokenizer.n_tokens(); ++id)
    if (f.tokenizer.piece(id).rfind("x", 0) == 0) ro.sampling.logit_bias.emplace_back(id, -INFINITY);
  auto engine = f.engine(false);
  const Generation g = generate(*engine, test_prompts(1)[0], ro);
  EXPECT_EQ(g.finish, FinishReason::kError);
  EXPECT_TRUE(g.tokens.empty());
}

}  // namespace
}  // namespace mtp::testing
