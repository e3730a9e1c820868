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

// ---- Numeric bounds: every string of a set accepted exactly when the validator takes its value ----------

// Whether the schema's grammar accepts `text` as a whole value.
class Accepts {
 public:
  explicit Accepts(const Json& schema) {
    auto gbnf = json_schema_to_gbnf(schema);
    EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
    if (!gbnf.ok()) return;
    auto g = parse_gbnf(*gbnf);
    EXPECT_TRUE(g.ok()) << *gbnf;
    if (!g.ok()) return;
    auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
    EXPECT_TRUE(m.ok());
    if (m.ok()) m_ = std::make_unique<Matcher>(std::move(*m));
  }
  bool operator()(const std::string& text) const {
    if (!m_) return false;
    auto s = m_->advance(m_->start(), text);
    return s.ok() && *s != Matcher::kReject && m_->is_complete(*s);
  }

 private:
  std::unique_ptr<Matcher> m_;
};

// Integer bounds, each side absent, inclusive, exclusive (draft 2020 and draft-04 forms) or a fraction
// (rounded inward): every integer from -1,100 to 1,100 is accepted exactly when it is within them.
TEST(JsonSchema, IntegerBoundsAcceptExactlyTheIntegersWithin) {
  const std::vector<std::string> lows = {"",
                                         R"("minimum":0)",
                                         R"("minimum":-7)",
                                         R"("minimum":1.5)",
                                         R"("exclusiveMinimum":0)",
                                         R"("exclusiveMinimum":-100)",
                                         R"("minimum":99,"exclusiveMinimum":true)",
                                         R"("minimum":10,"exclusiveMinimum":10)"};
  const std::vector<std::string> highs = {"",
                                          R"("maximum":0)",
                                          R"("maximum":1000)",
                                          R"("maximum":-9.5)",
                                          R"("exclusiveMaximum":100)",
                                          R"("exclusiveMaximum":-99)",
                                          R"("maximum":19,"exclusiveMaximum":true)"};
  int checked = 0;
  for (const std::string& lo : lows)
    for (const std::string& hi : highs) {
      const std::string text =
          str_cat(R"({"type":"integer")", lo.empty() ? "" : ",", lo, hi.empty() ? "" : ",", hi, "}");
      const Json schema = Json::parse(text);
      bool any = false;
      for (int v = -1100; v <= 1100; ++v) any = any || valid(schema, Json(v));
      if (!any) {  // min above max
        EXPECT_FALSE(json_schema_to_gbnf(schema).ok()) << text;
        continue;
      }
      const Accepts accepts(schema);
      for (int v = -1100; v <= 1100; ++v) {
        ASSERT_EQ(accepts(std::to_string(v)), valid(schema, Json(v))) << v << " under " << text;
        ++checked;
      }
      if (!lo.empty() || !hi.empty()) {
        EXPECT_FALSE(accepts("-0")) << text;  // bounded: no "-0"
      }
      EXPECT_FALSE(accepts("01")) << text;
      EXPECT_FALSE(accepts("1.0")) << text;
    }
  EXPECT_GT(checked, 30 * 2201);
  const Accepts from_one(Json::parse(R"({"type":"integer","minimum":1})"));
  EXPECT_TRUE(from_one("9999999999999999"));    // 16 digits, as an unbounded integer
  EXPECT_FALSE(from_one("10000000000000000"));  // 17
  EXPECT_TRUE(from_one("123 "));                // whitespace after it, as every value
}

// Whole-number bounds on numbers: strings of integral parts and fractions around each bound, signed, are
// accepted exactly when their value is within (those of up to 15 significant digits), and every accepted
// one parses to a double within (16-digit fractions next to an exclusive bound would round onto it).
TEST(JsonSchema, NumberBoundsAcceptExactlyTheNumbersWithin) {
  std::vector<std::string> texts;
  for (const char* sign : {"", "-"})
    for (const char* i : {"0", "1", "2", "9", "10", "11", "99", "100", "101", "12345"})
      for (const char* f : {"", ".0", ".000", ".5", ".05", ".000000000000001", ".999999999999999",
                            ".9999999999999999", ".0000000000000001"})
        texts.push_back(str_cat(sign, i, f));
  const std::vector<std::string> bounds = {
      R"("minimum":0)",
      R"("exclusiveMinimum":0)",
      R"("maximum":1)",
      R"("exclusiveMaximum":1)",
      R"("minimum":0,"maximum":1)",
      R"("exclusiveMinimum":-10,"maximum":100)",
      R"("minimum":-1,"exclusiveMaximum":11)",
      R"("exclusiveMinimum":2,"exclusiveMaximum":99)",
      R"("maximum":-2)",
      R"("exclusiveMaximum":-1,"minimum":-100)",
      R"("minimum":10,"maximum":10)",
      R"("minimum":1,"exclusiveMinimum":true,"maximum":2,"exclusiveMaximum":true)"};
  for (const std::string& b : bounds) {
    const Json schema = Json::parse(str_cat(R"({"type":"number",)", b, "}"));
    const Accepts accepts(schema);
    int taken = 0;
    for (const std::string& t : texts) {
      const bool ok = accepts(t);
      const bool within = valid(schema, Json::parse(t));
      taken += ok;
      if (ok) {
        EXPECT_TRUE(within) << t << " accepted under " << b;
      }
      const size_t digits = t.size() - (t[0] == '-') - (t.find('.') != std::string::npos);
      const bool minus_zero = t[0] == '-' && Json::parse(t).get<double>() == 0;  // never written
      if (digits <= 15 && t.find("00000000000") == std::string::npos && !minus_zero) {
        EXPECT_EQ(ok, within) << t << " under " << b;
      }
    }
    EXPECT_GT(taken, 0) << b;
  }
  EXPECT_FALSE(Accepts(Json::parse(R"({"type":"number","minimum":0})"))("1e5"));  // no exponent when bounded
}

TEST(JsonSchema, BoundsApplyToNumbersOnly) {
  const Accepts accepts(Json::parse(R"({"minimum":5})"));
  EXPECT_TRUE(accepts(R"("text")"));
  EXPECT_TRUE(accepts("[1]"));
  EXPECT_TRUE(accepts("5.5"));
  EXPECT_FALSE(accepts("4.5"));
  expect_samples_validate(R"({"type":["integer","null"],"minimum":-3,"exclusiveMaximum":40})");
  expect_samples_validate(R"({"type":"number","minimum":0,"maximum":1})");
  expect_samples_validate(R"({"type":"object","properties":{"n":{"type":"integer","exclusiveMinimum":0}},
      "required":["n"]})");
}

// Patterns: each value of a set (ASCII, with quotes, backslashes and control characters), written as a JSON
// string with the usual escapes, is accepted exactly when the validator's ECMAScript search finds the pattern
// in it (std::regex: the same definitions of '.', \d, \w and \s on ASCII).
TEST(JsonSchema, PatternsAcceptExactlyTheMatchingStrings) {
  const std::vector<std::string> patterns = {"^[A-Z]{3}$",
                                             R"(^\d{3}-\d{4}$)",
                                             "ab+c",
                                             "^(foo|bar)?x.$",
                                             "[^a-c]$",
                                             "^a.?b",
                                             R"(\s\S)",
                                             "^(?:[a-f0-9]{2})+$",
                                             R"(^\w+@\w+\.com$)",
                                             "^$",
                                             R"(^[\]\-]+$)",
                                             R"(q"\\)",
                                             R"(^\x41\u0042[\t\n])",
                                             "^(a|)b$",
                                             "x{2,3}$",
                                             "^[^\"]*$",
                                             R"(^\W\D\S)",
                                             "^a{2,}?$",
                                             "^[.][^.]",
                                             "^(|z)$"};
  const std::vector<std::string> values = {
      "",      "ABC",   "ABCD",  "abc",   "AB",   "555-1234",    "55-12345",    "abbbc",
      "ac",    "xabcx", "foox!", "barxy", "x\n",  "x\r",         "xz",          "fooxz",
      "d",     "a b",   "a\tb",  "0f1e",  "0f1",  "me@host.com", "me@host.org", "]-]",
      "q\"\\", "AB\t",  "AB\n",  "AB\r",  "b",    "ab",          "xx",          "xxx",
      "xxxx",  "a\x01", "\x1f",  "\"",    "!!!",  " \n ",        "aaa",         "cd",
      ".x",    "..",    "{a}",   "z",     "x\"y", "a\\b",        "\b\f"};
  int accepted = 0;
  for (const std::string& p : patterns) {
    const Json schema = {{"type", "string"}, {"pattern", p}};
    const Accepts accepts(schema);
    for (const std::string& v : values) {
      const bool ok = accepts(Json(v).dump());
      accepted += ok;
      EXPECT_EQ(ok, valid(schema, Json(v))) << "pattern " << p << ", value " << Json(v).dump();
    }
  }
  EXPECT_GT(accepted, 100);
  for (const char* p : {"^[A-Z]{3}$", "^a+b", R"(^\d{1,3}(\.\d{1,3}){3}$)", "^[b-z]{2,5}$", "^(?:ab|c)+$"})
    expect_samples_validate(str_cat(R"({"type":"string","pattern":)", Json(p).dump(), "}"));
  // Named groups, and '{' where no quantifier follows (ECMAScript's Annex B), which std::regex lacks.
  const Accepts named(Json::parse(R"({"type":"string","pattern":"(?<y>ab)|cd"})"));
  const Accepts plain(Json::parse(R"({"type":"string","pattern":"(?:ab)|cd"})"));
  for (const std::string& v : values) EXPECT_EQ(named(Json(v).dump()), plain(Json(v).dump())) << v;
  const Accepts brace(Json::parse(R"({"type":"string","pattern":"^{a}$"})"));
  EXPECT_TRUE(brace(R"("{a}")"));
  EXPECT_FALSE(brace(R"("a")"));
  // Without a type, a pattern constrains strings only.
  const Accepts untyped(Json::parse(R"({"pattern":"^a"})"));
  EXPECT_TRUE(untyped("5"));
  EXPECT_TRUE(untyped(R"("ab")"));
  EXPECT_FALSE(untyped(R"("ba")"));
}

TEST(JsonSchema, PatternsOutsideTheSubsetAreRefusedWithTheReason) {
  auto error = [](const std::string& pattern, const char* extra = "") {
    auto g = json_schema_to_gbnf(
        Json::parse(str_cat(R"({"type":"string","pattern":)", Json(pattern).dump(), extra, "}")));
    return g.ok() ? std::string() : g.status().message();
  };
  const std::string at = "JSON Schema at #: 'pattern' ";
  EXPECT_EQ(error("(?=a)b"), at + R"("(?=a)b": lookarounds are not supported)");
  EXPECT_EQ(error(R"((a)\1)"), at + R"("(a)\\1": backreferences are not supported)");
  EXPECT_EQ(error(R"(\bword)"), at + R"("\\bword": word boundaries (\b) are not supported)");
  EXPECT_EQ(error(R"(\p{L})"), at + R"("\\p{L}": the escape \p is not supported)");
  EXPECT_EQ(error("^a|b$"), at + R"("^a|b$": an anchor beside a top-level '|')");
  EXPECT_EQ(error("a^b"), at + R"("a^b": an anchor inside the pattern is not supported)");
  EXPECT_EQ(error("(ab"), at + R"("(ab": unbalanced '(')");
  EXPECT_EQ(error("ab)"), at + "\"ab)\": unbalanced ')'");
  EXPECT_EQ(error("[ab"), at + R"("[ab": unterminated '[')");
  EXPECT_EQ(error("[z-a]"), at + R"("[z-a]": a range out of order)");
  EXPECT_EQ(error("*a"), at + R"("*a": nothing to repeat before '*')");
  EXPECT_EQ(error("a{3,1}"), at + R"("a{3,1}": a repetition {n,m} with m below n)");
  EXPECT_EQ(error("caf\u00e9"), at + "\"caf\u00e9\": non-ASCII characters are not supported");
  EXPECT_EQ(error("[]"), at + R"("[]": a class that matches no character)");
  EXPECT_EQ(error("a", R"(,"maxLength":3)"), "JSON Schema at #: 'pattern' beside 'maxLength' (unsupported)");
  // Nesting is bounded (the parsers recurse once a level), and a long pattern is cut in the message.
  const std::string deep = std::string(300, '(') + "a" + std::string(300, ')');
  EXPECT_EQ(error(deep), at + "\"" + std::string(60, '(') + "...\": groups nested deeper than 256");
}

// "allOf" of one schema (pydantic's described "$ref") and of object schemas that merge.
TEST(JsonSchema, AllOfOneSchemaOrMergedObjects) {
  expect_samples_validate(R"({"type":"object","properties":{"unit":{"allOf":[{"$ref":"#/$defs/Unit"}],
      "description":"which unit","default":"c"}},"required":["unit"],"$defs":{"Unit":{"enum":["c","f"]}}})");
  const char* merged = R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
      {"$ref":"#/$defs/B"}],"$defs":{"B":{"properties":{"b":{"type":"string","maxLength":3}},"required":["b"]}}})";
  expect_samples_validate(merged);
  const Accepts accepts(Json::parse(merged));
  EXPECT_TRUE(accepts(R"({"a": 1, "b": "xy"})"));
  EXPECT_FALSE(accepts(R"({"a": 1})"));     // b is required by the second
  EXPECT_FALSE(accepts(R"({"b": "xy"})"));  // a by the first
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  auto error = [](const char* text) {
    auto g = json_schema_to_gbnf(Json::parse(text));
    return g.ok() ? std::string() : g.status().message();
  };
  EXPECT_EQ(error(R"({"type":"string","patternProperties":{}})"),
            "unsupported JSON Schema keyword 'patternProperties' at #");
  EXPECT_EQ(error(R"({"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}})"),
            "unsupported JSON Schema keyword 'multipleOf' at #/properties/n");
  EXPECT_EQ(error(R"({"type":"number","maximum":0.5})"),
            "JSON Schema at #: 'maximum' 0.5 bounds a number by a fraction (unsupported: whole-number bounds "
            "only)");
  EXPECT_EQ(error(R"({"type":"integer","minimum":1e20})"),
            "JSON Schema at #: 'minimum' 1e+20 has more than 15 integral digits (unsupported)");
  EXPECT_EQ(error(R"({"type":"integer","minimum":3,"maximum":2})"),
            "JSON Schema at #: no integer lies within its bounds");
  EXPECT_EQ(error(R"({"type":"number","exclusiveMinimum":true})"),
            "JSON Schema at #: 'exclusiveMinimum': true needs 'minimum'");
  EXPECT_EQ(error(R"({"type":"integer","maximum":"10"})"), "JSON Schema at #: 'maximum' must be a number");
  EXPECT_EQ(error(R"({"not":{"type":"string"}})"), "unsupported JSON Schema keyword 'not' at #");
  EXPECT_EQ(error(R"({"type":"object","allOf":[{"type":"object"}]})"),
            "JSON Schema at #: 'allOf' beside 'type' (unsupported)");
  EXPECT_EQ(error(R"({"allOf":[{"properties":{"a":{}}},{"type":"string"}]})"),
            "JSON Schema at #/allOf/1: 'allOf' merges object schemas of 'properties' and 'required' only "
            "(unsupported)");
  EXPECT_EQ(error(R"({"allOf":[{"properties":{"a":{}}},{"properties":{"a":{}}}]})"),
            "JSON Schema at #/allOf/1: property 'a' in two 'allOf' schemas (unsupported)");
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

TEST(JsonSchema, NestingDeeperThanTheLimitIsAnError) {
  Json schema = Json::object();
  for (int i = 0; i < 300; ++i) schema = Json{{"items", schema}};
  auto g = json_schema_to_gbnf(schema);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(": nested deeper than 256"), std::string::npos);
  for (int i = 0; i < 300 - 250; ++i) schema = schema["items"];  // 250 levels compile
  EXPECT_TRUE(json_schema_to_gbnf(schema).ok());
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
