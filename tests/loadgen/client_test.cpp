// The streaming client against the in-process fake server: timestamps, token counts per event, the server's
// timings, and every failure as a record with a message.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "fake_server.h"
#include "loadgen/stream_client.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

constexpr int64_t kMs = 1'000'000;

// Role chunk at once, first text after 50 ms, then chunks carrying 3 and 1 tokens 30 ms apart (5 tokens in
// all by usage; the characters 1 : 10 : 1 make the split by characters 1, 3, 1).
std::vector<ScriptedChunk> five_token_script() {
  const nlohmann::json timings = {{"draft_n", 4}, {"draft_n_accepted", 3}, {"predicted_n", 5}};
  return {{0, R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"},
          {50, delta_chunk("content", "H")},
          {30, delta_chunk("content", " abcdefghi")},
          {30, delta_chunk("content", "!")},
          {0, finish_chunk(7, 5, timings)},
          {0, "[DONE]"}};
}

RequestRecord run_once(const std::string& url, double timeout_s = 30) {
  auto client = StreamClient::create({url, "", timeout_s});
  EXPECT_TRUE(client.ok()) << client.status().message();
  RunClock clock;
  RequestRecord r;
  ChatRequest req;
  req.model = "m";
  req.prompt = "hello there";
  req.max_tokens = 16;
  (*client)->run(req, clock, r);
  return r;
}

// A raw HTTP server that answers the first request of each connection (a complete SSE stream, keep-alive) and
// closes the connection, without a byte of answer, when the next request arrives on it: what a client sees
// when the server closes a kept-alive connection just as a request goes out (llama-server after a stream).
class OneAnswerPerConnection {
 public:
  OneAnswerPerConnection() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneAnswerPerConnection() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int answered() const { return answered_; }

 private:
  // Reads one request (headers and a Content-Length body); false when the peer closed.
  static bool read_request(int c) {
    std::string in;
    char buf[4096];
    size_t need = std::string::npos;
    while (need == std::string::npos || in.size() < need) {
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
      const size_t end = in.find("\r\n\r\n");
      if (need == std::string::npos && end != std::string::npos) {
        const size_t cl = in.find("Content-Length: ");
        need = end + 4 + (cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16)));
      }
    }
    return true;
  }
  void serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      if (read_request(c)) {
        std::string body;
        for (const ScriptedChunk& k : two_delta_script()) body += "data: " + k.data + "\n\n";
        const std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\n\r\n";
        const std::string out = head + body;
        ++answered_;  // before the write: the client may read the answer before write() returns here
        if (::write(c, out.data(), out.size()) != static_cast<ssize_t>(out.size())) --answered_;
        read_request(c);  // the next request on this connection: closed unanswered
      }
      ::close(c);
    }
  }

  int fd_ = -1, port_ = 0;
  std::atomic<int> answered_{0};
  std::thread thread_;
};

// The request after a closed kept-alive connection goes again on a fresh one (once), and succeeds.
TEST(StreamClient, RequestOnAConnectionTheServerClosedIsSentAgain) {
  OneAnswerPerConnection server;
  auto client = StreamClient::create({server.url(), "", 30});
  ASSERT_TRUE(client.ok());
  RunClock clock;
  ChatRequest req;
  req.prompt = "hello";
  for (int i = 0; i < 4; ++i) {
    RequestRecord r;
    (*client)->run(req, clock, r);
    EXPECT_TRUE(r.ok) << "request " << i << ": " << r.error;
    EXPECT_EQ(r.completion_tokens, 3) << "request " << i;
  }
  EXPECT_EQ(server.answered(), 4);
}

TEST(StreamClient, MeasuresTtftAndSplitsTokensByCharacters) {
  FakeServer server(five_token_script());
  const RequestRecord r = run_once(server.url());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.prompt_tokens, 7);
  EXPECT_EQ(r.completion_tokens, 5);
  EXPECT_EQ(r.count_source, "usage");
  EXPECT_EQ(r.token_source, "chars");
  EXPECT_GE(r.first_token_ns - r.sent_ns, 50 * kMs);  // the role-only chunk is not the first token
  ASSERT_EQ(r.events.size(), 5u);                     // [DONE] is no event
  const std::vector<int64_t> tokens = {0, 1, 3, 1, 0};
  const std::vector<std::string> kinds = {"empty", "content", "content", "content", "empty"};
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(r.events[i].tokens, tokens[i]) << i;
    EXPECT_EQ(r.events[i].kind, kinds[i]) << i;
  }
  EXPECT_EQ(r.events[1].t_ns, r.first_token_ns);
  // Only lower bounds from the send are safe: a busy client may read two chunks at once.
  EXPECT_GE(r.events[2].t_ns - r.sent_ns, 80 * kMs);
  EXPECT_GE(r.events[3].t_ns - r.sent_ns, 110 * kMs);
  EXPECT_GE(r.end_ns, r.events[3].t_ns);
  EXPECT_EQ(r.timings["draft_n"], 4);
  EXPECT_EQ(r.timings["draft_n_accepted"], 3);
}

TEST(StreamClient, SendsAStreamingRequestWithUsage) {
  FakeServer server(five_token_script());
  ASSERT_TRUE(run_once(server.url() + "/v1/").ok);  // a /v1 suffix on the URL means the same server
  const auto body = nlohmann::json::parse(server.last_body());
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["max_tokens"], 16);
  EXPECT_EQ(body["messages"][0]["content"], "hello there");
}

TEST(StreamClient, PerChunkTimingsGiveExactTokensAndReasoningCountsAsFirstToken) {
  // Equal characters per chunk: a split by characters would give 2, 1, 2; the chunks' own counts say 1, 3, 1.
  FakeServer server({{20, delta_chunk("reasoning_content", "abc", {{"predicted_n", 1}})},
                     {10, delta_chunk("content", "def", {{"predicted_n", 4}})},
                     {10, delta_chunk("content", "ghi", {{"predicted_n", 5}})},
                     {0, finish_chunk(3, 5, {{"predicted_n", 5}})},
                     {0, "[DONE]"}});
  const RequestRecord r = run_once(server.url());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.token_source, "timings");
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[0].kind, "reasoning");
  EXPECT_EQ(r.first_token_ns, r.events[0].t_ns);
  EXPECT_EQ(r.events[0].tokens, 1);
  EXPECT_EQ(r.events[1].tokens, 3);
  EXPECT_EQ(r.events[2].tokens, 1);
  EXPECT_EQ(r.events[3].tokens, 0);
}

TEST(StreamClient, Http500IsAFailureWithItsBody) {
  FakeServer server({}, FakeMode::kStatus500);
  const RequestRecord r = run_once(server.url());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.http_status, 500);
  EXPECT_NE(r.error.find("HTTP 500"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("scripted failure"), std::string::npos) << r.error;
}

TEST(StreamClient, StreamClosedMidwayKeepsTheEventsSeen) {
  FakeServer server(five_token_script(), FakeMode::kCloseMidStream);
  const RequestRecord r = run_once(server.url());
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
  EXPECT_EQ(r.events.size(), 3u);  // the first half of six chunks
  EXPECT_GE(r.end_ns, r.sent_ns);
  EXPECT_EQ(r.token_source, "none");  // no usage arrived
}

TEST(StreamClient, StreamEndingWithoutDoneOrFinishIsAFailure) {
  FakeServer server({{0, delta_chunk("content", "a")}});
  const RequestRecord r = run_once(server.url());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("[DONE]"), std::string::npos) << r.error;
}

TEST(StreamClient, MalformedJsonInAnEventIsAFailure) {
  FakeServer server({{0, delta_chunk("content", "a")}, {0, "{\"choices\": [oops"}, {0, "[DONE]"}});
  const RequestRecord r = run_once(server.url());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("malformed JSON in SSE event 2"), std::string::npos) << r.error;
  EXPECT_EQ(r.events.size(), 1u);
}

TEST(StreamClient, ErrorEventIsAFailure) {
  FakeServer server({{0, R"({"error":{"message":"out of memory","code":500}})"}, {0, "[DONE]"}});
  const RequestRecord r = run_once(server.url());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("out of memory"), std::string::npos) << r.error;
}

TEST(StreamClient, UnreachablePortIsAFailure) {
  int port = 0;
  {
    FakeServer server({});  // bind a free port, then close it
    port = server.port();
  }
  const RequestRecord r = run_once("http://127.0.0.1:" + std::to_string(port), 5);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.http_status, 0);
  EXPECT_NE(r.error.find("connect"), std::string::npos) << r.error;
}

TEST(StreamClient, BadUrlIsRefused) {
  EXPECT_FALSE(StreamClient::create({"localhost:8080", "", 1}).ok());
  EXPECT_FALSE(StreamClient::create({"ftp://x", "", 1}).ok());
  auto s = split_url("http://h:1/v1/");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->origin, "http://h:1");
  EXPECT_EQ(s->prefix, "");
  EXPECT_EQ(split_url("https://h/api/v1")->prefix, "/api");
}

}  // namespace
}  // namespace mtp::loadgen
