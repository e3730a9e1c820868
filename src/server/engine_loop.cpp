// The engine thread (engine_loop.h).
#include "server/engine_loop.h"

#include <algorithm>
#include <cstdio>

#include "server/format.h"

namespace mtp::server {

// The engine thread's wake-up: the queue, the flags and every channel's cancel() notify it.
struct RequestChannel::Waker {
  std::mutex mu;
  std::condition_variable cv;
  bool poke = false;  // a channel was cancelled
};

bool RequestChannel::wait(std::vector<Update>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (updates_.empty()) cv_.wait_for(lock, timeout, [&] { return !updates_.empty(); });
  if (updates_.empty()) return false;
  for (Update& u : updates_) out.push_back(std::move(u));
  updates_.clear();
  return true;
}

void RequestChannel::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    waker_->poke = true;
  }
  waker_->cv.notify_all();
}

bool RequestChannel::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void RequestChannel::push(Update u) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    updates_.push_back(std::move(u));
  }
  cv_.notify_all();
}

struct EngineLoop::Active {
  Active(const Tokenizer& tok, Pending p, int32_t slot)
      : ch(std::move(p.ch)),
        decoder(tok),
        stop(std::move(p.job.stop)),
        slot(slot),
        max_tokens(p.job.options.max_tokens),
        may_draft(p.job.may_draft) {
    n_prompt = static_cast<int64_t>(p.job.prompt.size());
  }
  std::shared_ptr<RequestChannel> ch;
  StreamDecoder decoder;
  std::vector<std::string> stop;
  std::string held;       // decoded text not yet released (it may begin a stop string)
  std::string stop_word;  // the stop string that ended it
  int32_t slot = -1;      // -1 until the backend or an event names it
  int64_t max_tokens = -1;
  bool may_draft = false;
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  Timer since_submit;
  double first_token_ms = -1;
  // Ended by the server (a stop string, the client left, shutdown): the engine was told to cancel and its
  // kCancelled event (with the timings) is awaited.
  bool ended = false;
  std::string end_reason;
  std::optional<ApiError> end_error;
  uint64_t cancel_step = 0;
};

EngineLoop::EngineLoop(Backend& backend, const Tokenizer& tokenizer, Metrics& metrics, LoopOptions options)
    : backend_(backend),
      n_slots_(backend.n_slots()),
      tokenizer_(tokenizer),
      metrics_(metrics),
      opt_(options),
      waker_(std::make_shared<RequestChannel::Waker>()) {}

EngineLoop::~EngineLoop() {
  cancel_all();
  stop();
}

void EngineLoop::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

std::variant<std::shared_ptr<RequestChannel>, ApiError> EngineLoop::submit(GenerationJob job) {
  auto ch = std::make_shared<RequestChannel>(waker_);
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    if (draining_ || stop_) return server_error(503, "the server is shutting down", "shutting_down");
    if (!healthy_)
      return server_error(500, "the engine failed; the server must be restarted", "engine_failed");
    if (queue_.size() >= opt_.max_queue)
      return server_error(
          503,
          str_cat("the server is busy: ", queue_.size(), " requests are waiting for a slot; retry later"),
          "server_busy");
    queue_.push_back({std::move(job), ch});
  }
  waker_->cv.notify_all();
  return ch;
}

void EngineLoop::drain() {
  std::deque<Pending> refused;
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    draining_ = true;
    refused.swap(queue_);
  }
  for (Pending& p : refused) {
    Update u;
    u.done = true;
    u.error = server_error(503, "the server is shutting down", "shutting_down");
    p.ch->push(std::move(u));
  }
}

bool EngineLoop::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(waker_->mu);
  return waker_->cv.wait_until(lock, deadline, [&] { return queue_.empty() && busy_ == 0; });
}

void EngineLoop::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    cancel_all_ = true;
  }
  waker_->cv.notify_all();
  drain();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    stop_ = true;
  }
  waker_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<SlotInfo> EngineLoop::slots() const {
  std::lock_guard<std::mutex> lock(waker_->mu);
  if (!slots_.empty()) return slots_;
  std::vector<SlotInfo> idle(static_cast<size_t>(n_slots_));  // before the first publication
  for (int32_t k = 0; k < n_slots_; ++k) idle[static_cast<size_t>(k)].id = k;
  return idle;
}

std::vector<SlotInfo> EngineLoop::slot_view() const {
  std::vector<SlotInfo> view(static_cast<size_t>(n_slots_));
  for (int32_t k = 0; k < n_slots_; ++k) {
    view[static_cast<size_t>(k)].id = k;
    if (static_cast<size_t>(k) < last_in_slot_.size()) {
      view[static_cast<size_t>(k)].last = last_in_slot_[static_cast<size_t>(k)].last;
      view[static_cast<size_t>(k)].last_finish_reason =
          last_in_slot_[static_cast<size_t>(k)].last_finish_reason;
    }
  }
  auto fill = [](SlotInfo& s, uint64_t id, const Active& a, bool known) {
    s.is_processing = true;
    s.id_task = static_cast<int64_t>(id);
    s.n_prompt = a.n_prompt;
    s.n_decoded = a.n_generated;
    s.n_remain = a.max_tokens < 0 ? -1 : std::max<int64_t>(a.max_tokens - a.n_generated, 0);
    s.speculative = a.may_draft;
    s.slot_known = known;
  };
  std::vector<std::pair<uint64_t, const Active*>> unplaced;
  for (const auto& [id, a] : active_) {
    if (a->ended) continue;  // the engine freed its slot already; only its final event is awaited
    const bool in_range = a->slot >= 0 && a->slot < n_slots_;
    if (in_range && !view[static_cast<size_t>(a->slot)].is_processing) {
      fill(view[static_cast<size_t>(a->slot)], id, *a, true);
    } else {
      unplaced.emplace_back(id, a.get());
    }
  }
  // Requests whose slot is not known yet take the first free ones, as the engine assigns them.
  size_t next = 0;
  for (const auto& [id, a] : unplaced) {
    while (next < view.size() && view[next].is_processing) ++next;
    if (next == view.size()) break;
    fill(view[next], id, *a, false);
  }
  return view;
}

Gauges EngineLoop::gauges() const {
  std::lock_guard<std::mutex> lock(waker_->mu);
  Gauges g;
  g.slots_total = n_slots_;
  g.slots_busy = busy_;
  g.queue_length = queue_.size();
  g.drafting_slots = drafting_;
  g.cache = cache_stats_;
  g.kv_blocks = kv_blocks_;
  return g;
}

bool EngineLoop::healthy() const {
  std::lock_guard<std::mutex> lock(waker_->mu);
  return healthy_;
}

void EngineLoop::run() {
  std::vector<SlotEvent> events;
  for (;;) {
    std::deque<Pending> batch;
    bool cancel_everything = false;
    {
      std::unique_lock<std::mutex> lock(waker_->mu);
      // cancel_all_ alone is no reason to wake: it ends running requests (active_ wakes the loop while there
      // are any) and the queue is empty by then, so with nothing left the loop waits for stop(). Waking on it
      // spun this thread on a core from cancel_all() to stop() (the HTTP threads' end, seconds at shutdown).
      waker_->cv.wait(lock, [&] {
        return stop_ || waker_->poke || !active_.empty() ||
               (!queue_.empty() && backend_.n_busy() < backend_.n_slots());
      });
      waker_->poke = false;
      cancel_everything = cancel_all_;
      if (stop_ && active_.empty()) break;
      // Requests whose client left while they waited never reach the engine.
      std::erase_if(queue_, [](const Pending& p) { return p.ch->cancelled(); });
      const int32_t free_slots = backend_.n_slots() - backend_.n_busy();
      while (!cancel_everything && static_cast<int32_t>(batch.size()) < free_slots && !queue_.empty()) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      busy_ += static_cast<int32_t>(batch.size());  // counted while being admitted, for wait_idle()
    }
    const bool admitting = !batch.empty();
    admit(batch);
    if (admitting) publish_busy();
    for (auto& [id, a] : active_) {
      if (a->ended) continue;
      const bool gone = a->ch->cancelled();
      if (!gone && !cancel_everything) continue;
      backend_.cancel(id);
      a->ended = true;
      a->cancel_step = steps_;
      a->end_reason = "cancelled";
      if (!gone)
        a->end_error =
            server_error(503, "the server is shutting down; the request was cancelled", "shutting_down");
    }
    if (active_.empty()) {
      publish_busy();  // cancels publish too
      continue;
    }
    events.clear();
    StepInfo info;
    Status s = backend_.step(events, &info);
    ++steps_;
    if (!s.ok()) {
      // The engine's state is unknown now: refuse new work (/health reports it), then fail everything. In
      // that order: a client that has its error may ask /health at once.
      const ApiError e = server_error(500, "engine error: " + s.message(), "engine_error");
      std::deque<Pending> queued;
      {
        std::lock_guard<std::mutex> lock(waker_->mu);
        healthy_ = false;
        busy_ = 0;
        queued.swap(queue_);
      }
      fail_all(e);
      for (Pending& p : queued) {
        Update u;
        u.done = true;
        u.error = e;
        p.ch->push(std::move(u));
      }
      continue;
    }
    metrics_.on_step(info);
    if (opt_.log_steps) {
      // What an operator needs to see the throttle and the auto policy at work, step by step (one call: the
      // line is not split by other threads' output).
      std::fprintf(
          stderr,
          "mtp: step %llu: generating %d, rows %lld (prompt %lld), drafting %d, drafted %lld, accepted "
          "%lld, %.1f ms (draft %.1f ms)\n",
          static_cast<unsigned long long>(steps_), info.generating, static_cast<long long>(info.trunk_rows),
          static_cast<long long>(info.prompt_rows), info.drafting, static_cast<long long>(info.drafted),
          static_cast<long long>(info.accepted), info.seconds * 1e3, info.draft_seconds * 1e3);
    }
    for (SlotEvent& ev : events) handle_event(ev);
    // Requests the server ended whose kCancelled event did not come with this step: finish them with the
    // server's own timings rather than wait.
    std::vector<uint64_t> overdue;
    for (auto& [id, a] : active_)
      if (a->ended && a->cancel_step < steps_) overdue.push_back(id);
    for (uint64_t id : overdue) {
      Active& a = *active_.at(id);
      Update u;
      finish(id, a, std::move(u), a.end_reason);
    }
    {
      std::lock_guard<std::mutex> lock(waker_->mu);
      drafting_ = info.drafting;
    }
    publish_busy();
    deliver_step_updates();
  }
}

void EngineLoop::deliver_step_updates() {
  for (auto& [ch, u] : step_updates_) ch->push(std::move(u));
  step_updates_.clear();
}

void EngineLoop::admit(std::deque<Pending>& batch) {
  while (!batch.empty()) {
    Pending p = std::move(batch.front());
    batch.pop_front();
    std::vector<int32_t> prompt = p.job.prompt;
    Expected<uint64_t> id = backend_.submit(std::move(prompt), p.job.options);
    if (id.ok()) {
      active_.emplace(*id, std::make_unique<Active>(tokenizer_, std::move(p), backend_.slot_of(*id)));
      publish_busy();
      continue;
    }
    if (id.status().code() == StatusCode::kResourceExhausted && !active_.empty()) {
      // Does not fit now (memory held by running requests): back to the head of the queue, in order.
      std::lock_guard<std::mutex> lock(waker_->mu);
      queue_.push_front(std::move(p));
      while (!batch.empty()) {
        queue_.push_front(std::move(batch.back()));
        batch.pop_back();
      }
      return;
    }
    Update u;
    u.done = true;
    const bool exhausted = id.status().code() == StatusCode::kResourceExhausted;
    u.error = exhausted ? bad_request("the request does not fit the context: " + id.status().message(), "",
                                      "context_length_exceeded")
                        : (id.status().code() == StatusCode::kInvalidArgument
                               ? bad_request(id.status().message())
                               : server_error(500, "engine error: " + id.status().message(), "engine_error"));
    p.ch->push(std::move(u));
    metrics_.on_finish("error", RequestTimings{});
  }
}

namespace {

// The length of the longest suffix of `text` that is a proper prefix of one of `stops`.
size_t partial_stop_suffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    const size_t max_len = std::min(text.size(), s.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace

void EngineLoop::release_text(Active& a, Update& u, bool final) {
  size_t stop_at = std::string::npos;
  for (const std::string& s : a.stop) {
    const size_t at = a.held.find(s);
    if (at < stop_at) stop_at = at, a.stop_word = s;
  }
  if (stop_at != std::string::npos) {
    u.text += a.held.substr(0, stop_at);
    a.held.clear();
    a.ended = true;
    a.end_reason = "stop";
    return;
  }
  const size_t keep = final ? 0 : partial_stop_suffix(a.held, a.stop);
  u.text += a.held.substr(0, a.held.size() - keep);
  a.held.erase(0, a.held.size() - keep);
}

void EngineLoop::handle_event(SlotEvent& ev) {
  auto it = active_.find(ev.request_id);
  if (it == active_.end()) return;
  Active& a = *it->second;
  if (a.slot < 0) a.slot = ev.slot;
  Update u;
  int64_t n_new = 0;
  for (GeneratedToken& t : ev.tokens) {
    if (a.ended) break;  // tokens past a stop string (or a cancel) are dropped
    if (a.first_token_ms < 0) a.first_token_ms = a.since_submit.millis();
    ++a.n_generated;
    ++n_new;
    u.token_text.push_back(a.decoder.push(t.id));
    a.held += u.token_text.back();
    u.tokens.push_back(std::move(t));
    release_text(a, u, false);
    if (a.ended) {
      backend_.cancel(ev.request_id);
      a.cancel_step = steps_;
    }
  }
  metrics_.on_generated(n_new);
  if (ev.finish == FinishReason::kNone) {
    if (!u.text.empty() || !u.tokens.empty()) step_updates_.emplace_back(a.ch, std::move(u));
    return;
  }
  if (!a.ended) {
    a.held += a.decoder.flush();
    release_text(a, u, true);
    if (!a.ended) {
      switch (ev.finish) {
        case FinishReason::kLength:
          a.end_reason = "length";
          break;
        case FinishReason::kStop:
          a.end_reason = "stop";
          break;
        case FinishReason::kCancelled:
          a.end_reason = "cancelled";
          break;
        default:
          a.end_reason = "error";
          a.end_error = server_error(500, "engine error: " + ev.error, "engine_error");
          break;
      }
    }
  }
  u.timings = ev.timings;
  finish(ev.request_id, a, std::move(u), a.end_reason);
}

void EngineLoop::finish(uint64_t id, Active& a, Update u, std::string reason) {
  if (u.timings.n_prompt == 0 && u.timings.n_generated == 0 && u.timings.prompt_ms == 0) {
    // No engine timings (the request was ended by the server): measure from the server's side.
    u.timings.n_prompt = a.n_prompt;
    const double total = a.since_submit.millis();
    u.timings.prompt_ms = a.first_token_ms >= 0 ? a.first_token_ms : total;
    u.timings.gen_ms = a.first_token_ms >= 0 ? total - a.first_token_ms : 0;
  }
  u.timings.n_generated = a.n_generated;  // tokens the client got (not those past a stop string)
  const CacheUse& c = u.timings.cache;
  if (c.enabled && (opt_.log_cache || c.matched > c.cached))
    std::fprintf(stderr, "mtp serve: prefix cache: %s\n", cache_summary(u.timings).c_str());
  u.done = true;
  if (a.end_error) {
    u.error = a.end_error;
  } else {
    u.finish_reason = reason;
    u.stop_word = a.stop_word;
  }
  if (a.slot >= 0 && a.slot < n_slots_) {
    last_in_slot_.resize(static_cast<size_t>(n_slots_));
    last_in_slot_[static_cast<size_t>(a.slot)].last = std::make_shared<const RequestTimings>(u.timings);
    last_in_slot_[static_cast<size_t>(a.slot)].last_finish_reason = a.end_error ? "error" : reason;
  }
  metrics_.on_finish(reason, u.timings);
  std::shared_ptr<RequestChannel> ch = std::move(a.ch);
  active_.erase(id);
  publish_busy();          // before the client hears of it, so /health never lags its own answer
  deliver_step_updates();  // tokens of this step come before any request's end
  ch->push(std::move(u));
}

void EngineLoop::publish_busy() {
  // The KV-block and prefix-cache gauges with the busy count, as one snapshot: a reader that sees a slot free
  // also sees the blocks its request returned (published alone, busy 0 came with the last step's counts).
  std::optional<PrefixCacheStats> cache = backend_.cache_stats();
  std::optional<KvBlockCounts> kv = backend_.kv_blocks();
  std::vector<SlotInfo> view = slot_view();
  std::lock_guard<std::mutex> lock(waker_->mu);
  busy_ = static_cast<int32_t>(active_.size());
  cache_stats_ = std::move(cache);
  kv_blocks_ = kv;
  slots_ = std::move(view);
  waker_->cv.notify_all();
}

void EngineLoop::fail_all(const ApiError& error) {
  std::vector<uint64_t> ids;
  for (auto& [id, a] : active_) ids.push_back(id);
  for (uint64_t id : ids) {
    Active& a = *active_.at(id);
    a.end_error = error;
    finish(id, a, Update{}, "error");
  }
}

}  // namespace mtp::server
