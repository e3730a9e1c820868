// The trace readers on hand-written fixtures of every format (tests/loadgen/data), and malformed lines of
// each, which must fail with "PATH:LINE: why".
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "loadgen/trace.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

std::string data(const std::string& name) {
  return std::string(MTP_SOURCE_DIR) + "/tests/loadgen/data/" + name;
}

std::vector<TraceRequest> read_ok(const std::string& name, const std::string& format = "auto",
                                  TraceSkips* skips = nullptr) {
  auto r = read_trace(data(name), format, skips);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<TraceRequest>{};
}

TEST(TraceFormats, DetectedFromNameAndFirstLine) {
  for (const auto& [file, format] :
       std::vector<std::pair<std::string, std::string>>{{"trace.jsonl", "mtp"},
                                                        {"sharegpt.json", "sharegpt"},
                                                        {"mooncake.jsonl", "mooncake"},
                                                        {"azure.csv", "azure"},
                                                        {"burstgpt.csv", "burstgpt"},
                                                        {"vllm_custom.jsonl", "vllm-custom"},
                                                        {"sglang_agentic.json", "sglang-agentic"}}) {
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
  EXPECT_EQ(t[0].category, "");

  EXPECT_NEAR(t[1].arrival_s, 0.2505, 1e-9);
  EXPECT_FALSE(t[1].completions);
  EXPECT_FALSE(t[1].synthetic);
  ASSERT_EQ(t[1].messages.size(), 2u);
  EXPECT_EQ(t[1].messages[1]["content"], "Name a color.");
  EXPECT_EQ(t[1].extra["top_k"], 5);
  EXPECT_EQ(t[1].prompt_tokens, 21);
  EXPECT_EQ(t[1].output_tokens, 3);
  EXPECT_EQ(t[1].session, "s1");
  EXPECT_EQ(t[1].category, "chat");  // the traffic category a gate's rules may select

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

TEST(TraceFormats, VllmCustomPromptsWithOptionalOutputTokensAndBadLinesCounted) {
  TraceSkips skips;
  const std::vector<TraceRequest> t = read_ok("vllm_custom.jsonl", "auto", &skips);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].messages, Json::parse(R"([{"role":"user","content":"What is the capital of India?"}])"));
  EXPECT_EQ(t[0].output_tokens, 10);
  EXPECT_EQ(t[0].prompt_tokens, 8);   // ceil(29 characters / 4)
  EXPECT_EQ(t[1].output_tokens, -1);  // none given: the cap
  EXPECT_EQ(t[2].source, data("vllm_custom.jsonl") + ":6");
  EXPECT_EQ(t[2].output_tokens, 1520);
  for (const TraceRequest& q : t) EXPECT_LT(q.arrival_s, 0);
  // Lines 3 (not JSON), 4 (empty prompt) and 5 (output_tokens not a number) are left out and counted.
  EXPECT_EQ(skips.count, 3);
  EXPECT_EQ(skips.first, data("vllm_custom.jsonl") + ":3: not JSON");
}

TEST(TraceFormats, SglangAgenticTurnsCarryEarlierTurnsWithSyntheticReplies) {
  TraceSkips skips;
  const std::vector<TraceRequest> t = read_ok("sglang_agentic.json", "auto", &skips);
  ASSERT_EQ(t.size(), 4u);
  const std::string conv1 = data("sglang_agentic.json") + ": conversation 1";
  EXPECT_EQ(t[0].session, conv1);
  EXPECT_EQ(t[0].messages.size(), 2u);
  EXPECT_EQ(t[0].prompt_tokens, 73821);
  EXPECT_EQ(t[0].output_tokens, 220);
  // Turn 2: turn 1's messages, a synthetic assistant reply of 220 words, then the tool result.
  ASSERT_EQ(t[1].messages.size(), 4u);
  EXPECT_EQ(t[1].messages[2]["role"], "assistant");
  const std::string reply = t[1].messages[2]["content"].get<std::string>();
  EXPECT_EQ(std::count(reply.begin(), reply.end(), ' '), 219) << reply;
  EXPECT_EQ(t[1].messages[3]["role"], "tool");
  EXPECT_GT(t[1].prompt_tokens, 0);           // none recorded: estimated from the text
  EXPECT_EQ(t[2].source, conv1 + " turn 4");  // turn 3 has no messages
  EXPECT_EQ(t[2].messages.size(), 6u);
  EXPECT_EQ(t[2].prompt_tokens, 74894);
  EXPECT_EQ(t[3].session, data("sglang_agentic.json") + ": conversation 3");
  EXPECT_EQ(t[3].messages.size(), 1u);
  EXPECT_EQ(skips.count, 3);  // turn 3 of conversation 1, conversation 2, turn 1 of conversation 3
  EXPECT_EQ(skips.first, conv1 + " turn 3: no non-empty \"messages\" array");
}

TEST(TraceFormats, ImportedFormatsSkipGarbageButNeedTheirShape) {
  const std::string garbage = write_temp("trace_garbage", "\x01\x02\n{\"prompt\": 5}\n[1, 2\n");
  TraceSkips skips;
  auto custom = read_trace(garbage, "vllm-custom", &skips);
  ASSERT_TRUE(custom.ok());
  EXPECT_TRUE(custom->empty());
  EXPECT_EQ(skips.count, 3);
  auto agentic = read_trace(garbage, "sglang-agentic", &skips);
  ASSERT_FALSE(agentic.ok());  // not one JSON object: nothing to count lines of
  EXPECT_NE(agentic.status().message().find("not a JSON object"), std::string::npos);
  std::filesystem::remove(garbage);
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
      {"mtp", "jsonl",
       good_trace + "\n" +
           R"({"type":"trace","endpoint":"/v1/chat/completions","category":7,"messages":[{"role":"user","content":"x"}]})",
       ":2: \"category\" is not a non-empty string"},
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
