// Server counters and their Prometheus text exposition (GET /metrics). Every name is documented in
// notes/server.md. Thread-safe: the engine thread records steps and finished requests, HTTP threads record
// responses, and any thread renders.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace mtp::server {

// The engine's pool of KV blocks: `used` counts the blocks a slot or the prefix cache holds, so with every
// slot free it equals the cache's block count (a block held by neither is a leak).
struct KvBlockCounts {
  int64_t total = 0;
  int64_t used = 0;
};

// Values read at render time rather than accumulated.
struct Gauges {
  int32_t slots_total = 0;
  int32_t slots_busy = 0;
  size_t queue_length = 0;
  int32_t drafting_slots = 0;              // slots that drafted in the last step
  std::optional<PrefixCacheStats> cache;   // after the last engine step; none without a prefix cache
  std::optional<KvBlockCounts> kv_blocks;  // after the last engine step; none for a backend without a pool
};

class Metrics {
 public:
  // Upper bounds (seconds) of the step-time histogram's buckets; +Inf is implied.
  static constexpr std::array<double, 13> kStepBuckets = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                          0.1,    0.2,   0.5,   1.0,   2.0,  5.0};

  void on_response(std::string_view endpoint, int status);
  void on_step(const StepInfo& info);
  void on_generated(int64_t n_tokens);
  // A request that reached the engine ended; `reason` is stop, length, cancelled or error.
  void on_finish(std::string_view reason, const RequestTimings& timings);

  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> responses_;
  std::map<std::string, uint64_t> finished_;
  uint64_t prompt_tokens_ = 0;
  uint64_t prompt_tokens_cached_ = 0;  // finished requests' prompt tokens the prefix cache gave
  uint64_t cache_restores_ = 0;
  double cache_restore_seconds_ = 0;
  uint64_t generated_tokens_ = 0;
  uint64_t drafted_ = 0;
  uint64_t accepted_ = 0;
  std::array<uint64_t, speculative::kDraftHeads> drafted_by_head_{},
      accepted_by_head_{};  // index: speculative::DraftHead
  uint64_t steps_ = 0;
  double draft_seconds_ = 0;
  speculative::SpecStats spec_;  // finished requests, merged
  std::array<uint64_t, kStepBuckets.size()> step_buckets_{};
  double step_seconds_sum_ = 0;
  // Indexed by the number of slots generating in a step.
  std::vector<uint64_t> steps_by_generating_;
  std::vector<uint64_t> drafting_by_generating_;
  uint64_t drafting_slot_steps_ = 0;
};

}  // namespace mtp::server
