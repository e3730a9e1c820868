#include <gtest/gtest.h>

#include "base/status.h"

namespace mtp {
namespace {

Expected<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("want a positive number, got ", x);
  return x;
}

Expected<int> doubled(int x) {
  MTP_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  MTP_RETURN_IF_ERROR(parse_positive(a).status());
  MTP_RETURN_IF_ERROR(parse_positive(b).status());
  return Status::Ok();
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = corrupt("tensor '", "x", "' at byte ", 12);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "tensor 'x' at byte 12");
  EXPECT_EQ(s.with_context("f.gguf").message(), "f.gguf: tensor 'x' at byte 12");
  EXPECT_TRUE(Status::Ok().with_context("f").ok());
}

TEST(Expected, PropagatesErrors) {
  EXPECT_EQ(*doubled(4), 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "want a positive number, got -1");
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, 0).message(), "want a positive number, got 0");
}

TEST(Expected, OkStatusIsNotAValue) {
  Expected<int> e{Status::Ok()};
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace mtp
