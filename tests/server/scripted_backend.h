// A Backend that generates scripted token sequences, for testing the HTTP server without the model's
// randomness: exact replies (tool calls, reasoning, stop strings), a chosen pace (a delay per step), replies
// that never end by themselves, steps a test can hold, and a record of the cancellations it received. Used
// from the server's engine thread, like the Engine (the test thread only sets the atomics and the hold).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "server/backend.h"

namespace mtp::testing {

class ScriptedBackend final : public server::Backend {
 public:
  // `reply(prompt)` is the token sequence a request generates (then it ends with kStop, as at an end token).
  ScriptedBackend(int32_t n_slots, std::function<std::vector<int32_t>(const std::vector<int32_t>&)> reply)
      : n_slots_(n_slots), reply_(std::move(reply)) {}

  std::atomic<int> step_delay_ms{0};
  std::atomic<int> tokens_per_step{1};
  std::atomic<int> cancels{0};
  std::atomic<int> submits{0};
  std::atomic<bool> fail_steps{false};  // step() returns an engine error
  // Replies repeat from their start: a request ends only at max_tokens or when cancelled, so a test of what
  // happens to a running request does not depend on how fast the machine generates it.
  std::atomic<bool> endless{false};

  // While held, step() waits at its start: requests stay where they are (running ones in their slots, queued
  // ones in the server's queue, which the parked engine thread does not read) until released.
  void hold_steps(bool on) {
    std::lock_guard<std::mutex> lock(gate_mu_);
    held_ = on;
    gate_cv_.notify_all();
  }
  // Waits until the engine thread is parked in a held step; false after `seconds`.
  bool wait_until_parked(double seconds = 30) {
    std::unique_lock<std::mutex> lock(gate_mu_);
    return gate_cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return parked_; });
  }

  Expected<uint64_t> submit(std::vector<int32_t> prompt, const RequestOptions& options) override {
    if (static_cast<int32_t>(slots_.size()) >= n_slots_)
      return Status(StatusCode::kResourceExhausted, "no free slot");
    Slot s;
    s.tokens = reply_(prompt);
    s.max_tokens = options.max_tokens;
    s.n_prompt = static_cast<int64_t>(prompt.size());
    s.logprobs = options.logprobs;
    s.n_probs = options.n_probs;
    const uint64_t id = ++next_id_;
    slots_[id] = std::move(s);
    ++submits;
    return id;
  }
  void cancel(uint64_t id) override {
    if (slots_.erase(id) > 0) {
      ++cancels;
      cancelled_.push_back(id);
    }
  }
  Status step(std::vector<SlotEvent>& events, StepInfo* info) override {
    park_while_held();
    if (const int ms = step_delay_ms.load(); ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (fail_steps) return Status(StatusCode::kInternal, "scripted failure");
    for (uint64_t id : cancelled_) {
      SlotEvent ev;
      ev.request_id = id;
      ev.finish = FinishReason::kCancelled;
      events.push_back(std::move(ev));
    }
    cancelled_.clear();
    std::vector<uint64_t> finished;
    for (auto& [id, s] : slots_) {
      SlotEvent ev;
      ev.request_id = id;
      const bool repeat = endless.load() && !s.tokens.empty();
      for (int k = 0; k < tokens_per_step.load() && (repeat || s.next < s.tokens.size()); ++k) {
        if (s.max_tokens >= 0 && static_cast<int64_t>(s.next) >= s.max_tokens) break;
        GeneratedToken t;
        t.id = s.tokens[s.next++ % s.tokens.size()];
        t.logprob = -0.5f;
        if (s.logprobs)
          for (int32_t j = 0; j < s.n_probs; ++j) t.top.push_back({t.id + j, -0.5f - static_cast<float>(j)});
        ev.tokens.push_back(std::move(t));
      }
      const bool at_max = s.max_tokens >= 0 && static_cast<int64_t>(s.next) >= s.max_tokens;
      if (at_max || (!repeat && s.next >= s.tokens.size())) {
        ev.finish = at_max ? FinishReason::kLength : FinishReason::kStop;
        ev.timings.n_prompt = s.n_prompt;
        ev.timings.n_generated = static_cast<int64_t>(s.next);
        ev.timings.prompt_ms = 1.0;
        ev.timings.gen_ms = 2.0;
        finished.push_back(id);
      }
      events.push_back(std::move(ev));
    }
    for (uint64_t id : finished) slots_.erase(id);
    if (info != nullptr) {
      info->generating = static_cast<int32_t>(slots_.size() + finished.size());
      info->seconds = 0.001;
    }
    return Status::Ok();
  }
  bool idle() const override { return slots_.empty() && cancelled_.empty(); }
  int32_t n_slots() const override { return n_slots_; }
  int32_t n_busy() const override { return static_cast<int32_t>(slots_.size()); }
  // Counts the engine thread's reads of the gauges (once per pass of its loop).
  std::optional<server::KvBlockCounts> kv_blocks() const override {
    ++gauge_reads;
    return std::nullopt;
  }
  mutable std::atomic<int64_t> gauge_reads{0};

 private:
  void park_while_held() {
    std::unique_lock<std::mutex> lock(gate_mu_);
    if (!held_) return;
    parked_ = true;
    gate_cv_.notify_all();
    gate_cv_.wait(lock, [&] { return !held_; });
    parked_ = false;
  }

  struct Slot {
    std::vector<int32_t> tokens;
    size_t next = 0;
    int64_t max_tokens = -1;
    int64_t n_prompt = 0;
    bool logprobs = false;
    int32_t n_probs = 0;
  };
  int32_t n_slots_;
  std::function<std::vector<int32_t>(const std::vector<int32_t>&)> reply_;
  std::map<uint64_t, Slot> slots_;
  std::vector<uint64_t> cancelled_;
  uint64_t next_id_ = 0;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool held_ = false;
  bool parked_ = false;
};

}  // namespace mtp::testing
