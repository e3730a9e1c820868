// What the server's engine thread drives: the Engine's submit / cancel / step interface, behind a virtual
// interface so that tests can run the whole HTTP server over a scripted generator (exact tool-call output,
// controlled timing) as well as over the real engine.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"

namespace mtp::server {

class Backend {
 public:
  virtual ~Backend() = default;
  // Engine::submit: kInvalidArgument (a bad request), kResourceExhausted (no free slot, or the prompt does
  // not fit the context now).
  virtual Expected<uint64_t> submit(std::vector<int32_t> prompt, const RequestOptions& options) = 0;
  // Engine::cancel: the slot is free on return; the next step() reports a kCancelled event.
  virtual void cancel(uint64_t request_id) = 0;
  virtual Status step(std::vector<SlotEvent>& events, StepInfo* info) = 0;
  virtual bool idle() const = 0;
  virtual int32_t n_slots() const = 0;
  virtual int32_t n_busy() const = 0;
  // The slot a running request occupies, -1 when unknown (then the first event that names it tells).
  virtual int32_t slot_of(uint64_t request_id) const { return -1; }
  // The prefix cache's counters; none without a cache.
  virtual std::optional<PrefixCacheStats> cache_stats() const { return std::nullopt; }
  // The KV block pool's size and use; none for a backend without one.
  virtual std::optional<KvBlockCounts> kv_blocks() const { return std::nullopt; }
};

// The real engine. Like the Engine, used by one thread only.
class EngineBackend final : public Backend {
 public:
  explicit EngineBackend(Engine& engine) : engine_(engine) {}
  Expected<uint64_t> submit(std::vector<int32_t> prompt, const RequestOptions& options) override {
    return engine_.submit(std::move(prompt), options);
  }
  void cancel(uint64_t request_id) override { engine_.cancel(request_id); }
  Status step(std::vector<SlotEvent>& events, StepInfo* info) override { return engine_.step(events, info); }
  bool idle() const override { return engine_.idle(); }
  int32_t n_slots() const override { return engine_.n_slots(); }
  int32_t n_busy() const override { return engine_.n_busy(); }
  int32_t slot_of(uint64_t request_id) const override { return engine_.slot_of(request_id); }
  std::optional<PrefixCacheStats> cache_stats() const override {
    if (engine_.prefix_cache() == nullptr) return std::nullopt;
    return engine_.prefix_cache()->stats();
  }
  std::optional<KvBlockCounts> kv_blocks() const override {
    const Memory& m = engine_.memory();
    return KvBlockCounts{m.n_blocks(), m.n_blocks() - m.free_blocks()};
  }

 private:
  Engine& engine_;
};

}  // namespace mtp::server
