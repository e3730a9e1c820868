// SSE framing and the token split, without a network.
#include <gtest/gtest.h>

#include "loadgen/record.h"
#include "loadgen/sse.h"

namespace mtp::loadgen {
namespace {

TEST(SseParser, SplitsEventsAcrossFeedsAndLineEnds) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: {\"a\"").empty());
  EXPECT_TRUE(p.has_partial());
  std::vector<std::string> out =
      p.feed(":1}\r\n\r\n: a comment\n\ndata:x\ndata: y\nevent: e\n\ndata: [DONE]\n\n");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], "{\"a\":1}");
  EXPECT_EQ(out[1], "x\ny");
  EXPECT_EQ(out[2], "[DONE]");
  EXPECT_FALSE(p.has_partial());
}

RequestRecord with_chars(const std::vector<int64_t>& chars, int64_t total) {
  RequestRecord r;
  for (int64_t c : chars) {
    EventRecord e;
    e.chars = c;
    e.kind = c > 0 ? "content" : "empty";
    r.events.push_back(e);
  }
  r.completion_tokens = total;
  return r;
}

std::vector<int64_t> tokens_of(const RequestRecord& r) {
  std::vector<int64_t> t;
  for (const EventRecord& e : r.events) t.push_back(e.tokens);
  return t;
}

TEST(SplitTokens, OneTokenPerTextEventThenByCharacters) {
  RequestRecord r = with_chars({0, 4, 4, 8, 0}, 8);  // 3 text events: 1 each, 5 more by 4:4:8
  split_tokens(r);
  EXPECT_EQ(r.token_source, "chars");
  // Cumulative shares of the 5: 1.25, 2.5, 5 round to 1, 3, 5, so the extras are 1, 2, 2.
  EXPECT_EQ(tokens_of(r), (std::vector<int64_t>{0, 2, 3, 3, 0}));
}

TEST(SplitTokens, SumIsTheUsageTotalEvenWithFewerTokensThanEvents) {
  RequestRecord r = with_chars({3, 1, 1, 3}, 2);
  split_tokens(r);
  int64_t sum = 0;
  for (int64_t t : tokens_of(r)) sum += t;
  EXPECT_EQ(sum, 2);
}

TEST(SplitTokens, UnknownTotalLeavesTokensUnknown) {
  RequestRecord r = with_chars({3, 1}, -1);
  split_tokens(r);
  EXPECT_EQ(r.token_source, "none");
  EXPECT_EQ(tokens_of(r), (std::vector<int64_t>{-1, -1}));
}

}  // namespace
}  // namespace mtp::loadgen
