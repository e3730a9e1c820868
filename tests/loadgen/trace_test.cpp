// The trace readers on hand-written fixtures of every format (tests/loadgen/data), and malformed lines of
// each, which must fail with "PATH:LINE: why".
#include <gtest/gtest.h>

#include <filesystem>

#include "loadgen/trace.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

std::string data(const std::string& name) {
  return std::string(MTP_SOURCE_DIR) + "/tests/loadgen/data/" + name;
}

std::vector<TraceRequest> read_ok(const std::string& name, const std::string& format = "auto") {
  auto r = read_trace(data(name), format);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<TraceRequest>{};
}

TEST(TraceFormats, DetectedFromNameAndFirstLine) {
  for (const auto& [file, format] :
       std::vector<std::pair<std::string, std::string>>{{"trace.jsonl", "mtp"},
                                                        {"sharegpt.json", "sharegpt"},
                                                        {"mooncake.jsonl", "mooncake"},
                                                        {"azure.csv", "azure"},
                                                        {"burstgpt.csv", "burstgpt"}}) {
    auto f = detect_trace_format(data(file));
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(*f, format) << file;
  }
}

TEST(TraceFormats, OurTraceInArrivalOrderWithTextParametersAndLengths) {
  const std::vector<TraceRequest> t = read_ok("trace.jsonl");
  ASSERT_EQ(t.size(), 3u);
  // Lines are written when answers end; replay goes by arrival (t_ms), relative to the first.
  EXPECT_EQ(t[0].source, data("trace.jsonl") + ":2");
  EXPECT_DOUBLE_EQ(t[0].arrival_s, 0);
  EXPECT_TRUE(t[0].completions);
  EXPECT_EQ(t[0].prompt, "Once upon a time");
  EXPECT_EQ(t[0].extra, Json::parse(R"({"seed":7})"));
  EXPECT_EQ(t[0].output_tokens, 16);
  EXPECT_EQ(t[0].session, "");

  EXPECT_NEAR(t[1].arrival_s, 0.2505, 1e-9);
  EXPECT_FALSE(t[1].completions);
  EXPECT_FALSE(t[1].synthetic);
  ASSERT_EQ(t[1].messages.size(), 2u);
  EXPECT_EQ(t[1].messages[1]["content"], "Name a color.");
  EXPECT_EQ(t[1].extra["top_k"], 5);
  EXPECT_EQ(t[1].prompt_tokens, 21);
  EXPECT_EQ(t[1].output_tokens, 3);
  EXPECT_EQ(t[1].session, "s1");

  // Redacted: no text, a synthetic prompt of the recorded length; no recorded output length.
  EXPECT_NEAR(t[2].arrival_s, 1.0, 1e-9);
  EXPECT_TRUE(t[2].synthetic);
  EXPECT_TRUE(t[2].messages.is_null());
  EXPECT_EQ(t[2].prompt_tokens, 900);
  EXPECT_EQ(t[2].shape, (std::vector<std::pair<std::string, int64_t>>{{"user", 40}}));
  EXPECT_EQ(t[2].output_tokens, -1);
  EXPECT_EQ(t[2].session, "s1");
}

TEST(TraceFormats, ShareGptTurnsBecomeRequestsWithRecordedHistory) {
  const std::vector<TraceRequest> t = read_ok("sharegpt.json");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].session, "conv-a");
  EXPECT_EQ(t[0].messages, Json::parse(R"([{"role":"system","content":"You are terse."},
                                           {"role":"user","content":"Hello there"}])"));
  EXPECT_EQ(t[0].output_tokens, 8);  // ceil(29 characters / 4)
  EXPECT_EQ(t[0].prompt_tokens, 4 + 3);
  ASSERT_EQ(t[1].messages.size(), 4u);
  EXPECT_EQ(t[1].messages[2],
            Json::parse(R"({"role":"assistant","content":"Hi! How can I help you today?"})"));
  EXPECT_EQ(t[1].messages[3]["content"], "Tell me a joke");
  EXPECT_EQ(t[1].output_tokens, 1);
  EXPECT_EQ(t[1].session, "conv-a");
  EXPECT_EQ(t[2].session, "conv-b");
  EXPECT_EQ(t[2].output_tokens, -1);  // no reply recorded: the cap
  for (const TraceRequest& r : t) EXPECT_LT(r.arrival_s, 0);
}

TEST(TraceFormats, MooncakeLengthsTimesAndHashBlocks) {
  const std::vector<TraceRequest> t = read_ok("mooncake.jsonl");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0].arrival_s, 0);
  EXPECT_EQ(t[0].prompt_tokens, 1100);
  EXPECT_EQ(t[0].hash_ids, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(t[1].arrival_s, 1.0);  // the file's third line, by time
  EXPECT_EQ(t[1].source, data("mooncake.jsonl") + ":3");
  EXPECT_DOUBLE_EQ(t[2].arrival_s, 2.5);
  EXPECT_EQ(t[2].output_tokens, 1000);
  for (const TraceRequest& r : t) EXPECT_TRUE(r.synthetic);
}

TEST(TraceFormats, AzureCsvSkipsEmptyRowsAndOrdersByTime) {
  const std::vector<TraceRequest> t = read_ok("azure.csv");
  ASSERT_EQ(t.size(), 3u);  // the row with 0 context tokens is skipped
  EXPECT_EQ(t[0].prompt_tokens, 374);
  EXPECT_EQ(t[0].output_tokens, 44);
  EXPECT_NEAR(t[1].arrival_s, 1.5, 1e-6);
  EXPECT_EQ(t[1].prompt_tokens, 2000);
  EXPECT_NEAR(t[2].arrival_s, 50.995169 - 46.68059, 1e-6);
}

TEST(TraceFormats, BurstGptSkipsFailedRows) {
  const std::vector<TraceRequest> t = read_ok("burstgpt.csv");
  ASSERT_EQ(t.size(), 2u);  // the row with 0 response tokens is skipped
  EXPECT_EQ(t[0].prompt_tokens, 472);
  EXPECT_EQ(t[0].output_tokens, 18);
  EXPECT_DOUBLE_EQ(t[1].arrival_s, 7.5);
  EXPECT_EQ(t[1].prompt_tokens, 20);
  EXPECT_EQ(t[1].source, data("burstgpt.csv") + ":4");
}

// Each format with a bad line 2 (or the position of a JSON error): the error names file and line.
TEST(TraceFormats, MalformedLinesNameFileAndLine) {
  struct Case {
    std::string format, ext, text, why;
  };
  const std::string good_trace =
      R"({"type":"trace","endpoint":"/v1/chat/completions","messages":[{"role":"user","content":"x"}]})";
  const std::vector<Case> cases = {
      {"mtp", "jsonl", good_trace + "\n{\"type\":\"trace\",", ":2: not JSON"},
      {"mtp", "jsonl", good_trace + "\n" + R"({"type":"trace","endpoint":"/v1/embeddings"})",
       ":2: \"endpoint\""},
      {"mtp", "jsonl",
       good_trace + "\n" + R"({"type":"trace","endpoint":"/v1/chat/completions","redacted":true})",
       ":2: a line without text needs \"prompt_tokens\""},
      {"mtp", "jsonl", good_trace + "\n" + R"({"type":"trace","endpoint":5,"redacted":"yes"})",
       ":2: \"endpoint\" '' is not"},
      {"sharegpt", "json", "[\n{\"conversations\": [}\n]", ":2: not JSON"},
      {"sharegpt", "json", "[\n{\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}]",
       ": entry 1: turn 1: unknown speaker 'robot'"},
      {"mooncake", "jsonl", "{\"timestamp\":0,\"input_length\":5,\"output_length\":1}\n{\"timestamp\":1}",
       ":2: \"input_length\" is not an integer"},
      {"azure", "csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5", ":2: TIMESTAMP 'yesterday'"},
      {"azure", "csv", "TIMESTAMP,Context,GeneratedTokens\n", ":1: the header has no column 'ContextTokens'"},
      {"burstgpt", "csv", "Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,ten,5",
       ":2: Request tokens 'ten' is not a token count"},
      {"burstgpt", "csv", "Timestamp,Model,Request tokens,Response tokens\n1,GPT-4", ":2: 2 fields"},
  };
  int k = 0;
  for (const Case& c : cases) {
    const std::string path = write_temp(str_cat("trace_bad", k++), c.text);
    const std::string named = path + "." + c.ext;
    std::filesystem::rename(path, named);
    auto r = read_trace(named, c.format);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message().rfind(named + c.why, 0), 0u) << r.status().message();
    std::filesystem::remove(named);
  }
}

TEST(TraceFormats, MissingFileAndUnknownContent) {
  auto missing = read_trace("/nonexistent/trace.jsonl", "auto");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "cannot open '/nonexistent/trace.jsonl'");
  const std::string path = write_temp("trace_unknown", "{\"hello\": 1}\n");
  auto unknown = detect_trace_format(path);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            path + ":1: cannot tell the trace format from this line; give --format");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
