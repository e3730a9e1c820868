// What `mtp bench`'s client costs and how well it timestamps: closed-loop workers, each a loadgen
// StreamClient as the bench runner uses, against a scripted SSE server in a child process (so the client's
// CPU time is the parent's alone). The server notes on the monotonic clock when each chunk's write returned;
// the client's timestamp of the same event minus that is the timestamp error (loopback, scheduling and
// parsing: all that lies between a chunk leaving the server and its time in the run file).
//
// Prints per concurrency: events, wall time, the client's CPU time (user + system) and share of one core, CPU
// per event, and the timestamp error's p50 / p99 / max.
#include <httplib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "../bench_cli.h"
#include "loadgen/stream_client.h"

namespace {

using mtp::loadgen::Json;
using Clock = std::chrono::steady_clock;

int64_t mono_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct Options {
  std::vector<int> concurrency = {1, 16};
  int requests = 64;  // per level
  int chunks = 64;    // content chunks per request
  int gap_ms = 2;     // between chunks
};

// The child: answers each chat request with `chunks` content chunks `gap_ms` apart (two tokens each, as a
// speculative server's chunks often are), then a finish chunk with usage; GET /times returns, per request
// (keyed by its prompt), the monotonic time each JSON chunk's write returned.
[[noreturn]] void serve(const Options& o, int port_pipe) {
  httplib::Server server;
  std::mutex mu;
  std::map<std::string, std::vector<int64_t>> times;
  server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string key = nlohmann::json::parse(req.body)["messages"][0]["content"].get<std::string>();
    res.set_chunked_content_provider("text/event-stream", [&, key](size_t, httplib::DataSink& sink) {
      std::vector<int64_t> sent;
      auto send = [&](const std::string& data) {
        const std::string ev = "data: " + data + "\n\n";
        const bool ok = sink.write(ev.data(), ev.size());
        sent.push_back(mono_ns(Clock::now()));
        return ok;
      };
      for (int i = 0; i < o.chunks; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(o.gap_ms));
        if (!send(R"({"choices":[{"index":0,"delta":{"content":"ab c"},"finish_reason":null}]})"))
          return false;
      }
      const std::string usage =
          R"({"completion_tokens":)" + std::to_string(2 * o.chunks) + R"(,"prompt_tokens":4})";
      send(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":)" + usage + "}");
      {
        // Before [DONE], so a client that has its answer finds the times complete.
        std::lock_guard<std::mutex> lock(mu);
        times[key] = std::move(sent);
      }
      sink.write("data: [DONE]\n\n", 14);
      sink.done();
      return true;
    });
  });
  server.Get("/times", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    res.set_content(nlohmann::json(times).dump(), "application/json");
  });
  server.new_task_queue = [] { return new httplib::ThreadPool(64); };
  // As a streaming server must (docs/bench.md, TCP_NODELAY): else Nagle holds each chunk for the client's
  // delayed ACK, 40 ms, which is the server's delay, not the client's.
  server.set_tcp_nodelay(true);
  const int port = server.bind_to_any_port("127.0.0.1");
  if (write(port_pipe, &port, sizeof port) != sizeof port) std::_Exit(1);
  server.listen_after_bind();
  std::_Exit(0);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

struct Sent {
  std::string key;
  std::vector<int64_t> event_ns;  // monotonic, the client's timestamps
};

// One closed-loop level: `c` workers, `requests` requests in all; the client's events by prompt.
std::vector<Sent> run_level(const std::string& url, const Options& o, int c, int level) {
  const int64_t clock_start = mono_ns(Clock::now());
  const mtp::loadgen::RunClock clock;  // its time 0 is within a microsecond of clock_start
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<Sent> out;
  std::vector<std::thread> workers;
  for (int w = 0; w < c; ++w) {
    workers.emplace_back([&] {
      auto client = mtp::loadgen::StreamClient::create({url, "", 60});
      for (int i; (i = next++) < o.requests;) {
        mtp::loadgen::ChatRequest req;
        req.prompt = "level " + std::to_string(level) + " request " + std::to_string(i);
        mtp::loadgen::RequestRecord r;
        (*client)->run(req, clock, r);
        Sent s{req.prompt, {}};
        for (const auto& e : r.events) s.event_ns.push_back(clock_start + e.t_ns);
        if (!r.ok) std::fprintf(stderr, "client_overhead: %s: %s\n", req.prompt.c_str(), r.error.c_str());
        std::lock_guard<std::mutex> lock(mu);
        out.push_back(std::move(s));
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return out;
}

void measure(const std::string& url, const Options& o, int c, int level) {
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  const std::vector<Sent> sent = run_level(url, o, c, level);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  httplib::Client http(url);
  const auto res = http.Get("/times");
  const Json times = res ? Json::parse(res->body) : Json::object();
  std::vector<double> error_us;
  for (const Sent& s : sent) {
    if (!times.contains(s.key)) continue;
    const Json& server = times[s.key];
    for (size_t i = 0; i < s.event_ns.size() && i < server.size(); ++i)
      error_us.push_back(static_cast<double>(s.event_ns[i] - server[i].get<int64_t>()) * 1e-3);
  }
  const double events = static_cast<double>(error_us.size());
  std::printf("| %d | %.0f | %.2f | %.3f | %.2f%% | %.1f | %.0f / %.0f / %.0f |\n", c, events, wall, cpu,
              100 * cpu / wall, events > 0 ? cpu / events * 1e6 : 0.0, percentile(error_us, 50),
              percentile(error_us, 99),
              error_us.empty() ? 0.0 : *std::max_element(error_us.begin(), error_us.end()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"What mtp bench's client costs (CPU) and its timestamp error, against a scripted SSE server",
               "client_overhead"};
  app.add_option("--concurrency", o.concurrency, "Closed-loop levels")->delimiter(',')->capture_default_str();
  app.add_option("--requests", o.requests, "Requests per level")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--chunks", o.chunks, "Content chunks per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--gap-ms", o.gap_ms, "Milliseconds between chunks")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  mtp::bench::parse_or_exit(app, argc, argv);
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) serve(o, fds[1]);
  int port = 0;
  if (read(fds[0], &port, sizeof port) != sizeof port) return 1;
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  std::printf(
      "| c | events | wall s | client CPU s | of one core | CPU us / event | timestamp error us p50 / p99 / "
      "max |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t k = 0; k < o.concurrency.size(); ++k) measure(url, o, o.concurrency[k], static_cast<int>(k));
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  return 0;
}
