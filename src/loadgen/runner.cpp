#include "loadgen/runner.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "loadgen/prompts.h"

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
  std::vector<ChatRequest> requests;  // warm-up ones first
  std::atomic<int> next{0};
  std::mutex mu;  // serializes on_done and `status`
  Status status;
};

void worker(Level& lv, int w) {
  auto client = StreamClient::create(lv.o.client);
  if (!client.ok()) {
    std::lock_guard<std::mutex> lock(lv.mu);
    lv.status = client.status();
    return;
  }
  const int total = static_cast<int>(lv.requests.size());
  int64_t free_since = lv.clock.now_ns();  // closed loop: a request is due when its worker is free
  for (int i; (i = lv.next.fetch_add(1)) < total;) {
    RequestRecord r;
    r.id = lv.first_id + i;
    r.level = lv.concurrency;
    r.worker = w;
    r.warmup = i < lv.o.warmup;
    r.scheduled_ns = free_since;
    (*client)->run(lv.requests[static_cast<size_t>(i)], lv.clock, r);
    const Status written = lv.out.write_request(r);
    std::lock_guard<std::mutex> lock(lv.mu);
    if (!written.ok()) {
      lv.status = written;
      lv.next.store(total);  // the others stop after their current request
      return;
    }
    if (lv.on_done) lv.on_done(r);
    free_since = lv.clock.now_ns();
  }
}

}  // namespace

Json header_json(const BenchOptions& o, const std::string& model) {
  const Json opts = {{"concurrency", o.levels},
                     {"requests", o.requests},
                     {"warmup", o.warmup},
                     {"prompt_tokens", o.prompt_tokens},
                     {"max_tokens", o.max_tokens},
                     {"seed", o.seed},
                     {"timeout_s", o.client.timeout_s},
                     {"temperature", o.temperature ? Json(*o.temperature) : Json()},
                     {"ignore_eos", o.ignore_eos},
                     {"load", "closed-loop"}};
  return run_header("mtp bench", o.tool_version, o.client.url, model, opts);
}

Status run_bench(const BenchOptions& o, JsonlWriter& out, const RequestDone& on_done) {
  RunClock clock;
  MTP_ASSIGN_OR_RETURN(auto probe, StreamClient::create(o.client));
  std::string model = o.model;
  if (model.empty()) model = probe->first_model().value_or("");
  MTP_RETURN_IF_ERROR(out.write(header_json(o, model)));
  int64_t next_id = 0;
  for (int c : o.levels) {
    Level lv(o, clock, out, on_done, c, next_id);
    const int total = o.warmup + o.requests;
    for (int i = 0; i < total; ++i) {
      ChatRequest req;
      req.model = model;
      req.prompt = synthetic_prompt(o.seed, next_id + i, o.prompt_tokens);
      req.max_tokens = o.max_tokens;
      req.temperature = o.temperature;
      req.ignore_eos = o.ignore_eos;
      lv.requests.push_back(std::move(req));
    }
    std::vector<std::thread> workers;
    for (int w = 0; w < c; ++w) workers.emplace_back(worker, std::ref(lv), w);
    for (std::thread& t : workers) t.join();
    MTP_RETURN_IF_ERROR(lv.status);
    next_id += total;
  }
  return Status::Ok();
}

}  // namespace mtp::loadgen
