// Prometheus text exposition format 0.0.4 (metrics.h).
#include "server/metrics.h"

#include <cstdio>
#include <sstream>

#include "base/system_memory.h"

namespace mtp::server {
namespace {

// Prometheus floats: shortest round-trip form, +Inf spelled as Prometheus wants it.
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  double back = 0;
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::sscanf(buf, "%lf", &back) == 1 && back == v) break;
  }
  return buf;
}

std::string escape_label(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  void header(const char* name, const char* type, const char* help) {
    os_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, const std::string& labels, const std::string& value) {
    os_ << name;
    if (!labels.empty()) os_ << '{' << labels << '}';
    os_ << ' ' << value << '\n';
  }
  void metric(const char* name, const char* type, const char* help, const std::string& value) {
    header(name, type, help);
    sample(name, "", value);
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

}  // namespace

void Metrics::on_response(std::string_view endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[{std::string(endpoint), status}];
}

void Metrics::on_step(const StepInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  prompt_tokens_ += static_cast<uint64_t>(info.prompt_rows);
  drafted_ += static_cast<uint64_t>(info.drafted);
  accepted_ += static_cast<uint64_t>(info.accepted);
  drafted_by_head_[static_cast<size_t>(info.head)] += static_cast<uint64_t>(info.drafted);
  accepted_by_head_[static_cast<size_t>(info.head)] += static_cast<uint64_t>(info.accepted);
  draft_seconds_ += info.draft_seconds;
  step_seconds_sum_ += info.seconds;
  for (size_t b = 0; b < kStepBuckets.size(); ++b)
    if (info.seconds <= kStepBuckets[b]) ++step_buckets_[b];
  const size_t g = static_cast<size_t>(std::max(info.generating, 0));
  if (steps_by_generating_.size() <= g) {
    steps_by_generating_.resize(g + 1, 0);
    drafting_by_generating_.resize(g + 1, 0);
  }
  ++steps_by_generating_[g];
  drafting_by_generating_[g] += static_cast<uint64_t>(std::max(info.drafting, 0));
  drafting_slot_steps_ += static_cast<uint64_t>(std::max(info.drafting, 0));
}

void Metrics::on_generated(int64_t n_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  generated_tokens_ += static_cast<uint64_t>(n_tokens);
}

void Metrics::on_finish(std::string_view reason, const RequestTimings& timings) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[std::string(reason)];
  spec_.merge(timings.spec);
  prompt_tokens_cached_ += static_cast<uint64_t>(timings.cache.cached);
  if (timings.cache.cached > 0) {
    ++cache_restores_;
    cache_restore_seconds_ += timings.cache.restore_ms * 1e-3;
  }
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  w.header("mtp_requests_total", "counter", "HTTP responses by endpoint and status code.");
  for (const auto& [key, n] : responses_)
    w.sample("mtp_requests_total",
             "endpoint=\"" + escape_label(key.first) + "\",status=\"" + std::to_string(key.second) + "\"",
             std::to_string(n));
  w.header("mtp_requests_finished_total", "counter",
           "Generation requests that left the engine, by finish reason (stop, length, cancelled, error).");
  for (const auto& [reason, n] : finished_)
    w.sample("mtp_requests_finished_total", "reason=\"" + escape_label(reason) + "\"", std::to_string(n));
  w.metric("mtp_prompt_tokens_total", "counter", "Prompt tokens processed.", std::to_string(prompt_tokens_));
  w.metric("mtp_generated_tokens_total", "counter", "Tokens generated and sent to clients.",
           std::to_string(generated_tokens_));
  w.metric("mtp_draft_tokens_total", "counter", "Tokens drafted by the MTP head.", std::to_string(drafted_));
  w.metric("mtp_draft_accepted_tokens_total", "counter", "Drafted tokens accepted by verification.",
           std::to_string(accepted_));
  // Both heads always, so that a rate query over them has two series from the start.
  w.header("mtp_draft_head_tokens_total", "counter", "Tokens drafted, by the draft head that drafted them.");
  for (int h = 0; h < speculative::kDraftHeads; ++h)
    w.sample(
        "mtp_draft_head_tokens_total",
        std::string("head=\"") + speculative::draft_head_name(static_cast<speculative::DraftHead>(h)) + "\"",
        std::to_string(drafted_by_head_[static_cast<size_t>(h)]));
  w.header("mtp_draft_head_accepted_tokens_total", "counter",
           "Drafted tokens accepted by verification, by the draft head that drafted them.");
  for (int h = 0; h < speculative::kDraftHeads; ++h)
    w.sample(
        "mtp_draft_head_accepted_tokens_total",
        std::string("head=\"") + speculative::draft_head_name(static_cast<speculative::DraftHead>(h)) + "\"",
        std::to_string(accepted_by_head_[static_cast<size_t>(h)]));
  w.metric("mtp_verify_rounds_total", "counter",
           "Verification rounds that had a draft (finished requests; llama.cpp's n_call_accept).",
           std::to_string(spec_.rounds));
  w.header("mtp_draft_drafted_at_position_total", "counter",
           "Verification rounds that drafted at least this many tokens (finished requests).");
  for (size_t i = 0; i < spec_.drafted_at.size(); ++i)
    w.sample("mtp_draft_drafted_at_position_total", "position=\"" + std::to_string(i + 1) + "\"",
             std::to_string(spec_.drafted_at[i]));
  w.header("mtp_draft_accepted_at_position_total", "counter",
           "Verification rounds that accepted at least this many drafted tokens (finished requests).");
  for (size_t i = 0; i < spec_.accepted_at.size(); ++i)
    w.sample("mtp_draft_accepted_at_position_total", "position=\"" + std::to_string(i + 1) + "\"",
             std::to_string(spec_.accepted_at[i]));
  w.metric("mtp_draft_seconds_total", "counter", "Time spent in MTP draft passes.", num(draft_seconds_));
  // The whole process, the standard name: set beside the cache's gauges, what the server holds outside them.
  w.metric("process_resident_memory_bytes", "gauge", "Resident memory of the server process.",
           std::to_string(resident_bytes()));
  w.metric("mtp_slots", "gauge", "Slots (-np).", std::to_string(g.slots_total));
  w.metric("mtp_slots_busy", "gauge", "Slots holding a request.", std::to_string(g.slots_busy));
  w.metric("mtp_queue_length", "gauge", "Requests waiting for a slot.", std::to_string(g.queue_length));
  w.metric("mtp_drafting_slots", "gauge", "Slots that drafted in the last engine step.",
           std::to_string(g.drafting_slots));
  w.metric("mtp_drafting_slot_steps_total", "counter", "Sum over engine steps of the slots that drafted.",
           std::to_string(drafting_slot_steps_));
  w.header("mtp_steps_total", "counter", "Engine steps, by the number of slots generating in the step.");
  for (size_t k = 0; k < steps_by_generating_.size(); ++k)
    if (steps_by_generating_[k] > 0)
      w.sample("mtp_steps_total", "generating=\"" + std::to_string(k) + "\"",
               std::to_string(steps_by_generating_[k]));
  w.header("mtp_steps_drafting_slots_total", "counter",
           "Slots that drafted, summed over engine steps, by the number of slots generating in the step.");
  for (size_t k = 0; k < drafting_by_generating_.size(); ++k)
    if (steps_by_generating_[k] > 0)
      w.sample("mtp_steps_drafting_slots_total", "generating=\"" + std::to_string(k) + "\"",
               std::to_string(drafting_by_generating_[k]));
  if (g.kv_blocks) {
    w.metric("mtp_kv_blocks", "gauge",
             "KV blocks in the pool (sized by -c and -np, plus the prefix cache's share).",
             std::to_string(g.kv_blocks->total));
    w.metric("mtp_kv_blocks_used", "gauge", "KV blocks held by a slot or by the prefix cache.",
             std::to_string(g.kv_blocks->used));
  }
  w.metric("mtp_prompt_tokens_cached_total", "counter",
           "Prompt tokens of finished requests that the prefix cache gave (not computed).",
           std::to_string(prompt_tokens_cached_));
  if (g.cache) {
    const PrefixCacheStats& c = *g.cache;
    w.metric("mtp_prefix_cache_lookups_total", "counter", "Prompts looked up in the prefix cache.",
             std::to_string(c.lookups));
    w.metric("mtp_prefix_cache_tokens_looked_up_total", "counter", "Prompt tokens looked up.",
             std::to_string(c.tokens_looked_up));
    w.metric("mtp_prefix_cache_tokens_hit_total", "counter", "Prompt tokens restored from the prefix cache.",
             std::to_string(c.tokens_hit));
    w.metric(
        "mtp_prefix_cache_tokens_recomputed_total", "counter",
        "Prompt tokens whose KV was cached but lay behind the nearest checkpoint, so were computed again.",
        std::to_string(c.tokens_recomputed));
    w.metric("mtp_prefix_cache_evictions_total", "counter", "Checkpoints evicted from the prefix cache.",
             std::to_string(c.evictions));
    w.metric("mtp_prefix_cache_restores_total", "counter", "Requests that resumed from a checkpoint.",
             std::to_string(cache_restores_));
    w.metric("mtp_prefix_cache_restore_seconds_total", "counter", "Time spent copying checkpoints back.",
             num(cache_restore_seconds_));
    w.header("mtp_prefix_cache_bytes", "gauge",
             "Memory the prefix cache holds beyond live slots, by kind: KV blocks no slot shares, and "
             "checkpoints (recurrent states).");
    w.sample("mtp_prefix_cache_bytes", "kind=\"kv\"", std::to_string(c.kv_bytes));
    w.sample("mtp_prefix_cache_bytes", "kind=\"recurrent\"", std::to_string(c.state_bytes));
    w.metric("mtp_prefix_cache_budget_bytes", "gauge", "The prefix cache's budget (--cache-ram).",
             std::to_string(c.budget_bytes));
    w.metric("mtp_prefix_cache_checkpoints", "gauge", "Checkpoints held.", std::to_string(c.checkpoints));
    w.metric("mtp_prefix_cache_blocks", "gauge", "KV blocks held (shared with live slots or not).",
             std::to_string(c.nodes));
  }
  w.header("mtp_step_seconds", "histogram", "Wall time of engine steps.");
  for (size_t b = 0; b < kStepBuckets.size(); ++b)
    w.sample("mtp_step_seconds_bucket", "le=\"" + num(kStepBuckets[b]) + "\"",
             std::to_string(step_buckets_[b]));
  w.sample("mtp_step_seconds_bucket", "le=\"+Inf\"", std::to_string(steps_));
  w.sample("mtp_step_seconds_sum", "", num(step_seconds_sum_));
  w.sample("mtp_step_seconds_count", "", std::to_string(steps_));
  return w.str();
}

}  // namespace mtp::server
