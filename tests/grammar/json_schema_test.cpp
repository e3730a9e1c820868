// The JSON Schema compiler: for each supported keyword, strings drawn at random from the compiled grammar
// parse as JSON and satisfy the schema, checked by the gate's validator (the tool-call probe's, written from
// the JSON Schema specification, independent of the compiler); schemas it cannot express are refused naming
// the keyword.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "gate/schema.h"
#include "grammar/matcher.h"

namespace mtp::grammar {
namespace {

using Json = nlohmann::ordered_json;

// ---- The validator: the gate's (the tool-call probe's), independent of the compiler -------------------

bool valid(const Json& schema, const Json& v) {
  return gate::schema_violation(schema, v).empty();
}

TEST(SchemaValidator, RejectsWhatItShould) {  // the validator itself, so a pass below means something
  const Json s = Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"d":{"format":"date"}},
                               "required":["a"],"additionalProperties":false})");
  EXPECT_TRUE(valid(s, Json::parse(R"({"a":1,"d":"2026-12-05"})")));
  EXPECT_FALSE(valid(s, Json::parse(R"({"d":"2026-12-05"})")));
  EXPECT_FALSE(valid(s, Json::parse(R"({"a":1.5})")));
  EXPECT_FALSE(valid(s, Json::parse(R"({"a":1,"d":"2026-13-05"})")));
  EXPECT_FALSE(valid(s, Json::parse(R"({"a":1,"x":2})")));
}

// ---- Random strings of a grammar -------------------------------------------------------------------------

// One string drawn byte by byte from the language; past `soft_cap` bytes it prefers bytes that close things,
// so the walk ends. Empty when it did not finish within 4 * soft_cap bytes.
std::string sample(Matcher& m, std::mt19937& rng, size_t soft_cap) {
  std::string out;
  Matcher::StateId s = m.start();
  const std::string closers = "\"}]0123456789-TZ:";
  while (out.size() < 4 * soft_cap) {
    if (m.is_complete(s) && (out.size() > soft_cap || rng() % 8 == 0)) return out;
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      auto next = m.step(s, static_cast<uint8_t>(b));
      EXPECT_TRUE(next.ok());
      if (*next != Matcher::kReject) allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return m.is_complete(s) ? out : "";
    std::vector<uint8_t> preferred;
    if (out.size() > soft_cap)
      for (uint8_t b : allowed)
        if (closers.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(b);
    const auto& from = preferred.empty() ? allowed : preferred;
    const uint8_t b = from[rng() % from.size()];
    out += static_cast<char>(b);
    s = *m.step(s, b);
  }
  return "";
}

void expect_samples_validate(const std::string& schema_text, int n = 40) {
  const Json schema = Json::parse(schema_text);
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  auto g = parse_gbnf(*gbnf);
  ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << *gbnf;
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
  ASSERT_TRUE(m.ok());
  std::mt19937 rng(7);
  int finished = 0;
  for (int i = 0; i < n; ++i) {
    const std::string text = sample(*m, rng, 60);
    if (text.empty()) continue;
    ++finished;
    const Json value = Json::parse(text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << "not JSON: " << text << "\n" << *gbnf;
    EXPECT_TRUE(valid(schema, value)) << "invalid: " << text << "\nschema " << schema_text;
  }
  EXPECT_GT(finished, n / 2) << *gbnf;
}

TEST(JsonSchema, PrimitiveTypes) {
  for (const char* t : {"string", "number", "integer", "boolean", "null"})
    expect_samples_validate(str_cat(R"({"type":")", t, R"("})"));
  expect_samples_validate(R"({"type":["integer","null"]})");
  expect_samples_validate(R"({})");
  expect_samples_validate(R"(true)");
}

TEST(JsonSchema, ObjectsRequiredOptionalAndAdditional) {
  expect_samples_validate(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "email":{"type":"string"}},"required":["age"]})");
  expect_samples_validate(R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"}}})");
  expect_samples_validate(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],
      "additionalProperties":{"type":"string"}})");
  expect_samples_validate(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  expect_samples_validate(R"({"type":"object"})");
}

TEST(JsonSchema, EnumConstAnyOfOneOf) {
  expect_samples_validate(R"({"enum":["celsius","fahrenheit",3,null,{"k":"v\"q"}]})");
  expect_samples_validate(R"({"const":"exactly \u00e9"})");
  expect_samples_validate(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":3}]})");
  expect_samples_validate(R"({"oneOf":[{"type":"boolean"},{"type":"array","items":{"type":"null"}}]})");
}

TEST(JsonSchema, ArraysWithBounds) {
  expect_samples_validate(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})");
  expect_samples_validate(R"({"type":"array","items":{"type":"string"},"minItems":1})");
  expect_samples_validate(R"({"type":"array","maxItems":2})");
  expect_samples_validate(R"({"type":"array","maxItems":0})");
}

TEST(JsonSchema, RefsAndDefsWithRecursion) {
  expect_samples_validate(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},
      "$ref":"#/$defs/node"})");
  expect_samples_validate(R"({"definitions":{"pt":{"type":"array","items":{"type":"number"},"minItems":2,
      "maxItems":2}},"type":"object","properties":{"from":{"$ref":"#/definitions/pt"},"to":{"$ref":"#/definitions/pt"}},
      "required":["from","to"],"additionalProperties":false})");
}

TEST(JsonSchema, StringFormatsAndLengths) {
  for (const char* f : {"date", "time", "date-time", "uuid"})
    expect_samples_validate(str_cat(R"({"type":"string","format":")", f, R"("})"));
  expect_samples_validate(R"({"type":"string","minLength":2,"maxLength":5})");
}

TEST(JsonSchema, ATypicalToolSchema) {
  expect_samples_validate(R"({"type":"object","title":"get_weather","description":"d","properties":{
      "location":{"type":"string","description":"City"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},
      "days":{"type":"integer"},"when":{"type":"string","format":"date"}},"required":["location","unit"],
      "additionalProperties":false})");
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  auto error = [](const char* text) {
    auto g = json_schema_to_gbnf(Json::parse(text));
    return g.ok() ? std::string() : g.status().message();
  };
  EXPECT_EQ(error(R"({"type":"string","pattern":"^a+$"})"), "unsupported JSON Schema keyword 'pattern' at #");
  EXPECT_EQ(error(R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})"),
            "unsupported JSON Schema keyword 'minimum' at #/properties/n");
  EXPECT_EQ(error(R"({"allOf":[{"type":"string"}]})"), "unsupported JSON Schema keyword 'allOf' at #");
  EXPECT_EQ(error(R"({"type":"string","format":"email"})"),
            "unsupported JSON Schema string format 'email' at # (supported: date, time, date-time, uuid)");
  EXPECT_EQ(
      error(R"({"$ref":"https://example.com/s.json"})"),
      "JSON Schema at #: '$ref' \"https://example.com/s.json\" is not \"#\" or a name in the root's $defs or "
      "definitions");
  EXPECT_EQ(error(R"({"type":"widget"})"), "JSON Schema at #: unknown type 'widget'");
  EXPECT_EQ(error(R"({"type":"array","minItems":3,"maxItems":1})"),
            "JSON Schema at #: maxItems is below minItems");
  EXPECT_EQ(error(R"(false)"), "JSON Schema at #: 'false' matches nothing");
}

TEST(JsonSchema, JsonObjectGrammarTakesObjectsOnly) {
  auto g = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->is_complete(*m->advance(m->start(), R"({"a": [1, {"b": null}], "c": "d"})")));
  EXPECT_EQ(*m->advance(m->start(), "[1]"), Matcher::kReject);
  EXPECT_EQ(*m->advance(m->start(), "\"s\""), Matcher::kReject);
}

}  // namespace
}  // namespace mtp::grammar
