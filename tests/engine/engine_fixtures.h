// Shared helpers of the engine tests: structured tiny models (so that MTP drafts are often accepted and every
// acceptance length occurs), and a one-request generation loop over the Engine.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../gguf/test_util.h"
#include "engine/engine.h"
#include "surgery/synth.h"

namespace mtp::testing {

// Structured tiny models by weight type (noise < 0: plain random weights), written once per test binary.
inline const std::string& structured_model(GgmlType type, double noise = 1.75) {
  static TempDir dir;
  static std::map<std::pair<int, double>, std::string> paths;
  const auto key = std::make_pair(static_cast<int>(type), noise);
  auto it = paths.find(key);
  if (it != paths.end()) return it->second;
  surgery::SynthOptions opt;
  opt.shape = "tiny";
  opt.mtp = true;
  opt.type = type;
  opt.seed = 3;
  if (noise >= 0) opt.structured = noise;
  const std::string path =
      dir.file(std::string("tiny_") + std::string(type_name(type)) + "_" + std::to_string(noise) + ".gguf");
  ThreadPool pool(2);
  Status s = surgery::synth_model(opt, path, pool);
  if (!s.ok()) throw std::runtime_error(s.message());
  return paths.emplace(key, path).first->second;
}

inline std::unique_ptr<Engine> make_engine(const Model& model, const EngineOptions& eo, ThreadPool& pool) {
  auto e = Engine::create(model, eo, pool);
  if (!e.ok()) throw std::runtime_error(e.status().message());
  return std::move(e).value();
}

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<GeneratedToken> details;  // the same tokens with their logprobs (when asked)
  RequestTimings timings;
  FinishReason finish = FinishReason::kNone;
};

// Runs every request to completion on one engine (all submitted at once, request i with options[i]),
// returning them in order.
inline std::vector<Generation> generate_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<RequestOptions>& options) {
  std::vector<Generation> out(prompts.size());
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = engine.submit(prompts[i], options[i]);
    EXPECT_TRUE(id.ok()) << id.status().message();
    if (!id.ok()) return out;
    index[*id] = i;
  }
  std::vector<SlotEvent> events;
  while (!engine.idle()) {
    events.clear();
    Status s = engine.step(events);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) break;
    for (const SlotEvent& e : events) {
      Generation& g = out[index.at(e.request_id)];
      for (const GeneratedToken& t : e.tokens) {
        g.tokens.push_back(t.id);
        g.details.push_back(t);
      }
      if (e.finish != FinishReason::kNone) {
        g.finish = e.finish;
        g.timings = e.timings;
      }
    }
  }
  return out;
}

// The same with one set of options for every request.
inline std::vector<Generation> generate_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                            const RequestOptions& ro) {
  return generate_all(engine, prompts, std::vector<RequestOptions>(prompts.size(), ro));
}

inline Generation generate(Engine& engine, const std::vector<int32_t>& prompt, const RequestOptions& ro) {
  return generate_all(engine, {prompt}, ro)[0];
}

// Deterministic prompts of text-ish token ids (below 200, where the synthetic vocabularies hold bytes and
// merges).
inline std::vector<std::vector<int32_t>> test_prompts(size_t n, uint64_t seed = 1) {
  std::vector<std::vector<int32_t>> out;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    const size_t len = 1 + i * 7 % 23;
    for (size_t j = 0; j < len; ++j) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      p.push_back(static_cast<int32_t>(33 + x % 90));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace mtp::testing
