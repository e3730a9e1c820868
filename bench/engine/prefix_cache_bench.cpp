// The prefix cache's own costs at a model shape's widths: copying a checkpoint in (a prefill
// checkpoint) and back (a hit), moving the live state out (a request's end), the copy-on-write of the block
// a hit resumes in, and a lookup; and the sizes a cached conversation is made of (a checkpoint, a position's
// KV). No weights are needed: the costs are the Memory's. What a real session holds: multi_turn_bench
// prints it from /metrics.
//
//   prefix_cache_bench [--shape 35b-a3b] [--layers N] [--threads N] [--reps 20] [--cache-type f32|f16|q8_0]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "engine/prefix_cache.h"
#include "model/memory.h"

namespace {

using namespace mtp;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run(const std::string& shape, int64_t layers, int threads, int reps, const std::string& kv_type) {
  auto config = qwen35moe_shape(shape, layers);
  if (!config.ok()) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", config.status().message().c_str());
    return 2;
  }
  config->n_nextn = 1;
  auto type = kv_cache_type_from_name(kv_type);
  if (!type.ok()) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", type.status().message().c_str());
    return 2;
  }
  MemoryOptions mo;
  mo.n_ctx = 32768;
  mo.n_seq = 2;
  mo.n_snapshots = 3;
  mo.cache_type_k = mo.cache_type_v = *type;
  mo.extra_kv_bytes = uint64_t{1} << 30;
  auto mem = Memory::create(*config, mo);
  if (!mem.ok()) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", mem.status().message().c_str());
    return 1;
  }
  ThreadPool pool(threads);
  const double mib = 1024.0 * 1024.0;
  const double state_mib = static_cast<double>(mem->state_bytes()) / mib;
  std::printf("shape %s, %lld trunk layers, KV %s, block %lld positions, %d threads\n", shape.c_str(),
              static_cast<long long>(config->n_layer), kv_type.c_str(), static_cast<long long>(mo.block_size),
              pool.size());
  std::printf(
      "checkpoint (recurrent state of every delta-net layer): %.2f MiB; KV block %.2f MiB (%.1f KiB a "
      "position, MTP block included)\n",
      state_mib, static_cast<double>(mem->block_bytes()) / mib,
      static_cast<double>(mem->block_bytes()) / 1024.0 / static_cast<double>(mo.block_size));

  const int32_t s = *mem->seq_create();
  GdnState st = mem->new_state();
  std::fill_n(st.data(), st.floats(), 0.5f);
  std::vector<double> save, restore, take, cow;
  for (int r = 0; r < reps + 2; ++r) {
    Timer t;
    mem->save_state(s, st, &pool);
    const double a = t.millis();
    t.reset();
    mem->restore_state(s, st, &pool);
    const double b = t.millis();
    t.reset();
    GdnState moved = mem->take_state(s);
    mem->seq_reset(s);  // what a released sequence pays: the fresh buffer zeroed
    const double c = t.millis();
    if (r >= 2) save.push_back(a), restore.push_back(b), take.push_back(c);
  }
  // Copy on write: a second sequence shares a cached block and writes from its middle.
  {
    const int32_t donor = *mem->seq_create();
    for (int r = 0; r < reps + 2; ++r) {
      mem->seq_reset(donor);
      if (!mem->ensure_positions(donor, mo.block_size)) return 1;
      const int32_t b = mem->seq(donor).blocks[0];
      mem->seq_reset(s);
      if (!mem->seq_attach(s, std::span<const int32_t>(&b, 1), mo.block_size / 2, 0, 0).ok()) return 1;
      Timer t;
      if (!mem->begin_writes(s, mo.block_size / 2)) return 1;
      if (r >= 2) cow.push_back(t.millis());
    }
    mem->seq_reset(s);
    mem->seq_free(donor);
  }
  auto rate = [&](double ms) { return ms > 0 ? state_mib / 1024.0 / (ms * 1e-3) : 0.0; };
  std::printf("save a checkpoint (prefill)    %7.2f ms  (%.1f GiB/s)\n", median(save), rate(median(save)));
  std::printf("restore a checkpoint (a hit)   %7.2f ms  (%.1f GiB/s)\n", median(restore),
              rate(median(restore)));
  std::printf("move the live state out + reset %6.2f ms\n", median(take));
  std::printf("copy on write of a half block  %7.3f ms\n", median(cow));

  // A lookup of a 32K-token prompt against one cached 32K-token history, a checkpoint at its end.
  {
    PrefixCache cache(*mem, {uint64_t{1} << 40});
    std::vector<int32_t> tokens(32768);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7919 % 50000);
    if (!mem->ensure_positions(s, static_cast<int64_t>(tokens.size()))) return 1;
    mem->seq(s).n_past = static_cast<int64_t>(tokens.size());
    std::vector<Checkpoint> cs(1);
    cs[0].pos = static_cast<int64_t>(tokens.size());
    cs[0].state = mem->new_state();
    cs[0].hidden.assign(static_cast<size_t>(config->n_embd), 0.0f);
    cache.insert("", tokens, mem->seq(s).blocks, 0, 0, std::move(cs));
    tokens.push_back(1);
    std::vector<double> look;
    for (int r = 0; r < reps; ++r) {
      Timer t;
      const CacheHit hit = cache.lookup("", tokens);
      look.push_back(t.millis());
      if (hit.pos != 32768) return 1;
    }
    std::printf("lookup of a 32K-token prompt   %7.3f ms\n", median(look));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "35b-a3b", kv = "f32";
  int64_t layers = 0;
  int threads = 0, reps = 20;
  CLI::App app{"The prefix cache's costs: checkpoint copies, copy on write, lookup, a conversation's weight",
               "prefix_cache_bench"};
  app.add_option("--shape", shape, "Model shape: tiny or 35b-a3b")
      ->check(CLI::IsMember({"tiny", "35b-a3b"}))
      ->capture_default_str();
  app.add_option("--layers", layers, "Trunk layers (0: the shape's)")->check(CLI::Range(0, 4096));
  app.add_option("-t,--threads", threads, "Threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--reps", reps, "Repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--cache-type", kv, "KV cache type: f32, f16 or q8_0")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}))
      ->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  return run(shape, layers, threads, reps, kv);
}
