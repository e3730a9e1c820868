#include <gtest/gtest.h>

#include "gguf/metadata.h"

namespace mtp {
namespace {

TEST(Metadata, TypedGettersReportMissingKeysAndWrongTypes) {
  Metadata md;
  md.set("a.u32", Value::scalar<uint32_t>(7));
  md.set("a.i32", Value::scalar<int32_t>(-7));
  md.set("a.str", Value::string("s"));
  md.set("a.strs", Value::string_array({"x"}));
  EXPECT_EQ(*md.get<uint32_t>("a.u32"), 7u);
  auto wrong = md.get<int32_t>("a.u32");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "metadata key 'a.u32' has type u32, expected i32");
  auto missing = md.get<uint32_t>("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*md.get_integer("a.i32"), -7);
  EXPECT_FALSE(md.get_integer("a.str").ok());
  EXPECT_FALSE(md.get_string("a.u32").ok());
  EXPECT_EQ(*md.get_or<uint32_t>("nope", 3), 3u);
  EXPECT_FALSE(md.get_or<uint32_t>("a.str", 3).ok());
  EXPECT_FALSE(md.get_integer_array("a.strs").ok());
  auto strs = md.get_string_array("a.strs");
  ASSERT_TRUE(strs.ok());
  EXPECT_EQ((**strs)[0], "x");
  EXPECT_NE(md.get_string_array("a.u32").status().message().find("expected an array of strings"),
            std::string::npos);
}

TEST(Metadata, SetKeepsOrderSetLastMovesToEnd) {
  Metadata md;
  md.set("a", Value::scalar<uint32_t>(1));
  md.set("b", Value::scalar<uint32_t>(2));
  md.set("c", Value::scalar<uint32_t>(3));
  md.set("a", Value::scalar<uint32_t>(10));
  EXPECT_EQ(md.entries()[0].key, "a");
  md.set_last("a", Value::scalar<uint32_t>(11));
  EXPECT_EQ(md.entries()[2].key, "a");
  EXPECT_EQ(*md.get<uint32_t>("a"), 11u);
  EXPECT_EQ(*md.get<uint32_t>("b"), 2u);
  EXPECT_TRUE(md.erase("b"));
  EXPECT_FALSE(md.erase("b"));
  EXPECT_EQ(*md.get<uint32_t>("c"), 3u);
  EXPECT_EQ(md.size(), 2u);
}

TEST(Value, DisplayIsShortAndEscaped) {
  EXPECT_EQ(Value::array<uint32_t>({11, 11, 10, 0}).to_display(), "[u32 x 4: 11, 11, 10, 0]");
  EXPECT_EQ(Value::string("a\"b\n").to_display(), "\"a\\\"b\\n\"");
  EXPECT_EQ(Value::array<int32_t>({1, 2, 3}).to_display(2), "[i32 x 3: 1, 2, ...]");
  EXPECT_EQ(Value::scalar(false).to_display(), "false");
}

}  // namespace
}  // namespace mtp

namespace mtp {
namespace {

TEST(Metadata, SetAfterInsertsBehindTheAnchor) {
  Metadata md;
  md.set("a", Value::scalar<uint32_t>(1));
  md.set("b", Value::scalar<uint32_t>(2));
  md.set_after("a", "x", Value::scalar<uint32_t>(9));
  ASSERT_EQ(md.size(), 3u);
  EXPECT_EQ(md.entries()[1].key, "x");
  EXPECT_EQ(*md.get<uint32_t>("b"), 2u);
  md.set_after("b", "x", Value::scalar<uint32_t>(10));  // exists: replaced in place
  EXPECT_EQ(md.entries()[1].key, "x");
  EXPECT_EQ(*md.get<uint32_t>("x"), 10u);
  md.set_after("missing", "y", Value::scalar<uint32_t>(3));
  EXPECT_EQ(md.entries().back().key, "y");
}

}  // namespace
}  // namespace mtp
