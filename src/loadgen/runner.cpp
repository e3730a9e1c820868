#include "loadgen/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include "loadgen/prompts.h"
#include "loadgen/replay.h"

namespace mtp::loadgen {
namespace {

// What the workers of one level share.
struct Level {
  Level(const BenchOptions& o, const RunClock& clock, JsonlWriter& out, const RequestDone& on_done, int c,
        int64_t first_id)
      : o(o), clock(clock), out(out), on_done(on_done), concurrency(c), first_id(first_id) {}

  const BenchOptions& o;
  const RunClock& clock;
  JsonlWriter& out;
  const RequestDone& on_done;
  int concurrency = 1;
  int64_t first_id = 0;
  int64_t start_ns = 0;  // set when the workers start
  double rate = 0;       // 0: closed loop
  int repeat = 0;
  std::vector<int64_t> offsets_ns;    // with a rate: when each request is due, from start_ns
  std::vector<ChatRequest> requests;  // warm-up ones first
  std::atomic<int> next{0};
  std::mutex mu;  // serializes on_done and `status`
  Status status;
};

// When request i is due: its arrival time with a rate (waiting for it), else when the worker became free.
int64_t due_ns(const Level& lv, int i, int64_t free_since) {
  if (lv.offsets_ns.empty()) return free_since;
  const int64_t due = lv.start_ns + lv.offsets_ns[static_cast<size_t>(i)];
  const int64_t wait = due - lv.clock.now_ns();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
  return due;
}

// Sends one request and records it; false when the run file failed (the level then stops).
bool send(Level& lv, StreamClient& client, int i, RequestRecord& r) {
  client.run(lv.requests[static_cast<size_t>(i)], lv.clock, r);
  const Status written = lv.out.write_request(r);
  std::lock_guard<std::mutex> lock(lv.mu);
  if (!written.ok()) {
    lv.status = written;
    lv.next.store(static_cast<int>(lv.requests.size()));  // the others stop after their current request
    return false;
  }
  if (lv.on_done) lv.on_done(r);
  return true;
}

// With a baseline, request i goes to both servers one after the other, target first when i is even: neither
// server always runs right after the other, so a warm-up or slowdown one leaves behind is shared equally.
// Ids 2n (target) and 2n+1 (baseline) of prompt n = `pair`.
bool send_pair(Level& lv, StreamClient* clients[2], int i, RequestRecord r) {
  const int64_t n = r.id;
  for (int k = 0; k < 2; ++k) {
    const int server = (k + i) % 2;  // 0 target, 1 baseline
    RequestRecord one = r;
    one.id = 2 * n + server;
    one.pair = n;
    one.server = server == 0 ? "target" : "baseline";
    if (k == 1) one.scheduled_ns = lv.clock.now_ns();  // due when the first of the pair ended
    if (!send(lv, *clients[server], i, one)) return false;
  }
  return true;
}

Expected<std::unique_ptr<StreamClient>> baseline_client(const BenchOptions& o) {
  ClientOptions b = o.client;
  b.url = o.baseline_url;
  return StreamClient::create(b);
}

void worker(Level& lv, int w) {
  auto client = StreamClient::create(lv.o.client);
  auto baseline = lv.o.baseline_url.empty()
                      ? Expected<std::unique_ptr<StreamClient>>(std::unique_ptr<StreamClient>())
                      : baseline_client(lv.o);
  if (!client.ok() || !baseline.ok()) {
    std::lock_guard<std::mutex> lock(lv.mu);
    lv.status = client.ok() ? baseline.status() : client.status();
    return;
  }
  StreamClient* clients[2] = {client->get(), baseline->get()};
  const int total = static_cast<int>(lv.requests.size());
  int64_t free_since = lv.clock.now_ns();  // closed loop: a request is due when its worker is free
  for (int i; (i = lv.next.fetch_add(1)) < total;) {
    RequestRecord r;
    r.id = lv.first_id + i;
    r.level = lv.concurrency;
    r.rate = lv.rate;
    r.repeat = lv.repeat;
    r.worker = w;
    r.warmup = i < lv.o.warmup;
    r.scheduled_ns = due_ns(lv, i, free_since);
    if (!(clients[1] ? send_pair(lv, clients, i, r) : send(lv, *clients[0], i, r))) return;
    free_since = lv.clock.now_ns();
  }
}

// Request `id` of a dataset: entry id mod size, built as `mtp replay` builds it (its messages or prompt,
// recorded parameters, synthetic text for length-only traces), the recorded output length capped.
ChatRequest dataset_request(const BenchOptions& o, const std::string& model, int64_t id) {
  ReplayOptions ro;
  ro.seed = o.seed;
  ro.max_tokens_cap = o.max_tokens;
  const std::vector<TraceRequest>& d = *o.dataset;
  return replay_request(ro, d[static_cast<size_t>(id) % d.size()], id, model, "");
}

// Fills the level's requests with the next synthetic prompts or dataset entries.
void add_requests(Level& lv, const std::string& model, int64_t first_id) {
  const BenchOptions& o = lv.o;
  for (int i = 0; i < o.warmup + o.requests; ++i) {
    const int64_t id = first_id + i;
    ChatRequest req;
    if (o.dataset && !o.dataset->empty()) {
      req = dataset_request(o, model, id);
    } else {
      req.prompt =
          synthetic_prompt(o.seed, id, prompt_length(o.seed, id, o.prompt_tokens, o.prompt_tokens_max));
      req.max_tokens = o.max_tokens;
    }
    req.model = model;
    req.temperature = o.temperature;
    req.ignore_eos = o.ignore_eos;
    lv.requests.push_back(std::move(req));
  }
}

// The servers' speculative-decoding counters around the level (target, then baseline if any).
std::vector<SpecCounterWindow> open_counter_windows(const BenchOptions& o) {
  std::vector<SpecCounterWindow> windows;
  windows.emplace_back(o.client, o.on_warning);
  if (!o.baseline_url.empty()) {
    ClientOptions b = o.client;
    b.url = o.baseline_url;
    windows.emplace_back(b, o.on_warning);
  }
  return windows;
}

Status run_level(Level& lv) {
  std::vector<SpecCounterWindow> counters = open_counter_windows(lv.o);
  lv.start_ns = lv.clock.now_ns();
  std::vector<std::thread> workers;
  for (int w = 0; w < lv.concurrency; ++w) workers.emplace_back(worker, std::ref(lv), w);
  for (std::thread& t : workers) t.join();
  MTP_RETURN_IF_ERROR(lv.status);
  for (size_t k = 0; k < counters.size(); ++k) {
    Json where = {{"level", lv.concurrency}, {"repeat", lv.repeat}};
    if (lv.rate > 0) where["rate"] = lv.rate;
    if (counters.size() > 1) where["server"] = k == 0 ? "target" : "baseline";
    if (Json line = counters[k].finish(where); !line.is_null()) MTP_RETURN_IF_ERROR(lv.out.write(line));
  }
  return Status::Ok();
}

// One run of every level (repeat `rep`); request ids, and so prompts, continue from `next_id`.
Status run_sweep(const BenchOptions& o, const RunClock& clock, JsonlWriter& out, const RequestDone& on_done,
                 const std::string& model, int rep, int64_t& next_id) {
  const int total = o.warmup + o.requests;
  const bool open_loop = !o.rates.empty();
  const size_t n = open_loop ? o.rates.size() : o.levels.size();
  const int cap = *std::max_element(o.levels.begin(), o.levels.end());
  for (size_t k = 0; k < n; ++k, next_id += total) {
    Level lv(o, clock, out, on_done, open_loop ? cap : o.levels[k], next_id);
    lv.repeat = rep;
    if (open_loop) {
      lv.rate = o.rates[k];
      // Each repeat draws its own arrivals: repeats are samples of the same process, not copies.
      lv.offsets_ns = poisson_offsets_ns(lv.rate, total, o.seed, static_cast<int>(rep * n + k));
    }
    add_requests(lv, model, next_id);
    MTP_RETURN_IF_ERROR(run_level(lv));
  }
  return Status::Ok();
}

}  // namespace

std::vector<int64_t> poisson_offsets_ns(double rate, int n, uint64_t seed, int level_index) {
  // Our own inverse CDF over the top 53 bits, not std::exponential_distribution: the standard library's
  // distributions differ between implementations, and the schedule must not.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(level_index) + 1);
  std::vector<int64_t> out;
  double t_s = 0;
  for (int i = 0; i < n; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    t_s += -std::log1p(-u) / rate;
    out.push_back(static_cast<int64_t>(t_s * 1e9));
  }
  return out;
}

Json header_json(const BenchOptions& o, const std::string& model) {
  Json opts = {
      {"concurrency", o.levels},
      {"requests", o.requests},
      {"warmup", o.warmup},
      {"repeat", o.repeat},
      {"prompt_tokens", o.prompt_tokens},
      {"prompt_tokens_max", o.prompt_tokens_max > o.prompt_tokens ? Json(o.prompt_tokens_max) : Json()},
      {"max_tokens", o.max_tokens},
      {"seed", o.seed},
      {"timeout_s", o.client.timeout_s},
      {"count_tokens", token_count_name(o.client.count)},
      {"temperature", o.temperature ? Json(*o.temperature) : Json()},
      {"ignore_eos", o.ignore_eos},
      {"rate", o.rates.empty() ? Json() : Json(o.rates)},
      {"baseline", o.baseline_url.empty() ? Json() : Json(o.baseline_url)},
      {"load", o.rates.empty() ? "closed-loop" : "poisson"}};
  if (o.dataset) {
    opts["dataset"] = o.dataset_path;
    opts["dataset_format"] = o.dataset_format;
    opts["dataset_requests"] = o.dataset->size();
    opts["skipped_dataset_lines"] = o.dataset_skipped;
  }
  return run_header("mtp bench", o.tool_version, o.client.url, model, opts);
}

Status run_bench(const BenchOptions& o, JsonlWriter& out, const RequestDone& on_done) {
  RunClock clock;
  MTP_ASSIGN_OR_RETURN(auto probe, StreamClient::create(o.client));
  std::string model = o.model;
  if (model.empty()) model = probe->first_model().value_or("");
  MTP_RETURN_IF_ERROR(out.write(header_json(o, model)));
  int64_t next_id = 0;
  for (int rep = 0; rep < o.repeat; ++rep)
    MTP_RETURN_IF_ERROR(run_sweep(o, clock, out, on_done, model, rep, next_id));
  return Status::Ok();
}

}  // namespace mtp::loadgen
