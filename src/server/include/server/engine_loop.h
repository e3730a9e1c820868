// The server's engine thread (docs/architecture.md section 6): the only thread that touches the Backend (the
// Engine). HTTP threads hand it jobs through a bounded queue and read each request's updates from its
// channel.
//
// Each iteration: requests waiting in the queue move into free slots (FIFO), requests whose client went away
// are cancelled, then one engine step runs over all busy slots (continuous batching: a new request joins the
// next step). The step's tokens are detokenized here, so that a stop string ends its request at once
// (Engine::cancel) and never waits for the client's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/timer.h"
#include "server/api.h"
#include "server/backend.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace mtp::server {

struct GenerationJob {
  std::vector<int32_t> prompt;
  RequestOptions options;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any of these
  bool may_draft = false;         // for /slots: the server drafts and the request did not turn it off
};

// What the engine thread sends to the thread that serves a request.
struct Update {
  std::string text;                    // newly released text (stop strings and their prefixes held back)
  std::vector<GeneratedToken> tokens;  // tokens generated since the last update
  // Per token: the text it completed (whole UTF-8 characters; a token inside a character adds "", the one
  // that ends it carries it all), before stop strings are held back.
  std::vector<std::string> token_text;
  bool done = false;
  std::string finish_reason;      // on done: "stop", "length" or "cancelled"
  std::string stop_word;          // on done: the stop string that ended the request ("" otherwise)
  std::optional<ApiError> error;  // on done: the request failed (finish_reason is then empty)
  RequestTimings timings;         // on done
};

// One request's mailbox, shared between its HTTP thread and the engine thread.
class RequestChannel {
 public:
  struct Waker;
  explicit RequestChannel(std::shared_ptr<Waker> waker) : waker_(std::move(waker)) {}

  // HTTP side: moves pending updates into `out`; waits up to `timeout` when there are none. Returns whether
  // anything was moved.
  bool wait(std::vector<Update>& out, std::chrono::milliseconds timeout);
  // The client went away: the engine thread frees the slot before its next step.
  void cancel();
  bool cancelled() const;

  // Engine side.
  void push(Update u);

 private:
  std::shared_ptr<Waker> waker_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Update> updates_;
  bool cancelled_ = false;
};

// One slot as GET /slots shows it: the request running in it now, and what the last one that finished there
// did (its timings arrive only when it ends).
struct SlotInfo {
  int32_t id = 0;
  bool is_processing = false;
  int64_t id_task = -1;      // the running request's engine id; -1 when idle
  int64_t n_prompt = 0;      // the running request's prompt tokens
  int64_t n_decoded = 0;     // tokens it generated so far
  int64_t n_remain = -1;     // tokens it may still generate (max_tokens - n_decoded)
  bool speculative = false;  // it may draft
  // False when the slot is assumed: a request whose slot the backend did not name yet is shown in a free one.
  bool slot_known = true;
  // The last request that finished in this slot (shared: the view is copied after every step).
  std::shared_ptr<const RequestTimings> last;
  std::string last_finish_reason;
};

struct LoopOptions {
  size_t max_queue = 64;  // requests waiting for a slot; more are refused with 503
  int retry_after_s = 1;  // the Retry-After of that refusal
  // One stderr line per engine step: what the batch held, what was drafted, its time.
  bool log_steps = false;
  // One stderr line per request on what the prefix cache reused (false: only for requests whose prompt
  // matched cached KV that could not be reused, the silent re-prefill users otherwise never see).
  bool log_cache = false;
};

class EngineLoop {
 public:
  EngineLoop(Backend& backend, const Tokenizer& tokenizer, Metrics& metrics, LoopOptions options);
  ~EngineLoop();  // cancel_all() and stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void start();
  // Queues a job; the error is a 503 when the queue is full or the server is shutting down, a 500 after an
  // engine failure.
  std::variant<std::shared_ptr<RequestChannel>, ApiError> submit(GenerationJob job);

  // Shutdown, in this order: drain() refuses new jobs and fails the queued ones (503); wait_idle() lets the
  // running ones finish; cancel_all() ends the rest; stop() joins the thread.
  void drain();
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  void cancel_all();
  void stop();

  Gauges gauges() const;
  int32_t n_slots() const { return n_slots_; }
  // One entry per slot, as of the last engine step (or admission, or finish).
  std::vector<SlotInfo> slots() const;
  bool healthy() const;
  const LoopOptions& options() const { return opt_; }

 private:
  struct Pending {
    GenerationJob job;
    std::shared_ptr<RequestChannel> ch;
  };
  struct Active;

  void run();
  void admit(std::deque<Pending>& batch);
  void handle_event(SlotEvent& ev);
  // Moves text from a.held to u.text up to a stop string (ending the request) or a possible stop prefix.
  void release_text(Active& a, Update& u, bool final);
  void finish(uint64_t id, Active& a, Update u, std::string reason);
  void fail_all(const ApiError& error);
  void publish_busy();  // busy_ = active_.size(), the slot view and the KV/cache gauges, for /metrics,
                        // /slots, wait_idle()
  void deliver_step_updates();  // sends what handle_event held back (after the step's slot view is published)
  std::vector<SlotInfo> slot_view() const;  // engine thread: from active_ and last_in_slot_

  Backend& backend_;
  const int32_t n_slots_;  // read once: other threads never call the backend
  const Tokenizer& tokenizer_;
  Metrics& metrics_;
  LoopOptions opt_;
  std::shared_ptr<RequestChannel::Waker> waker_;  // the queue and the flags below live under its mutex
  std::deque<Pending> queue_;
  bool draining_ = false;
  bool cancel_all_ = false;
  bool stop_ = false;
  bool healthy_ = true;
  int32_t busy_ = 0;
  int32_t drafting_ = 0;
  std::optional<PrefixCacheStats> cache_stats_;
  std::optional<KvBlockCounts> kv_blocks_;
  std::vector<SlotInfo> slots_;
  std::thread thread_;
  // Engine thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Active>> active_;
  std::vector<SlotInfo> last_in_slot_;  // per slot: only `last` and `last_finish_reason` are used
  // A step's token updates, sent once the step's slot view is published, so that a client never sees a
  // token that /slots does not count yet.
  std::vector<std::pair<std::shared_ptr<RequestChannel>, Update>> step_updates_;
  uint64_t steps_ = 0;
};

}  // namespace mtp::server
