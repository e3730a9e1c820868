// server_sweep without the server: the same closed loop (c clients, each sending its next greedy ignore_eos
// request as soon as the previous one finished, `rounds` requests per client) driven straight into one
// Engine per profile. The profiles' engines run in lockstep, one step of each in turn, and each is timed by
// its own steps only: on a shared machine a burst of foreign load then hits every profile alike instead of
// whichever happened to run at the time. Per profile and concurrency it prints tokens/s (generated tokens
// over the engine's own step time) and, per number of generating slots, the steps, their mean time and the
// mean draft length the policy chose.
//
//   engine_sweep -m MODEL [-np 16] [-c 8192] [-t N] [--max-tokens 64] [--min-tokens N] [--rounds 2]
//                [--levels 1,2,4,8,16] [--profiles off,on,slots1,auto] [--draft-max 3] [--draft-vocab N]
//                [--trace]
//
// --min-tokens N: each request's max_tokens drawn in [N, --max-tokens] (sweep_options.h says why).
//
// Profiles: off, on (every slot drafts --draft-max), slots1 (only while one slot generates), auto (the
// policy, choosing the draft head where it has two: engine.h kAutoSubsetMinVocab, or --draft-vocab N), and
// auto-full / auto-subset (auto with that head only). Acceptance is printed per head where both drafted.
//
// --trace prints one line per engine step (profile, generating slots, trunk and prompt rows, drafting
// slots, drafted, accepted, step and draft milliseconds, the draft head) to stderr.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../bench_util.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "sweep_options.h"
#include "tokenizer/tokenizer.h"

using namespace mtp;

namespace {

struct Options : bench::SweepOptions {
  int64_t draft_vocab = 0;
  bool trace = false;
};

struct ByGenerating {
  int64_t steps = 0, drafted = 0;
  double seconds = 0;
};

// One profile's closed loop at one concurrency, advanced a step at a time.
class Level {
 public:
  Level(Engine& engine, const Tokenizer& tok, int concurrency, const Options& o)
      : engine_(engine),
        tok_(tok),
        o_(o),
        left_(static_cast<size_t>(concurrency), std::max(1, o.rounds)),
        active_(static_cast<size_t>(concurrency), 0) {}

  bool done() const { return done_; }
  double tok_s() const { return seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0.0; }
  double acceptance() const {
    return drafted_ > 0 ? static_cast<double>(accepted_) / static_cast<double>(drafted_) : -1.0;
  }
  int64_t drafted(speculative::DraftHead h) const { return drafted_by_head_[static_cast<size_t>(h)]; }
  double acceptance(speculative::DraftHead h) const {
    const size_t i = static_cast<size_t>(h);
    return drafted_by_head_[i] > 0
               ? static_cast<double>(accepted_by_head_[i]) / static_cast<double>(drafted_by_head_[i])
               : -1.0;
  }
  const std::map<int32_t, ByGenerating>& by_generating() const { return by_gen_; }

  Status step(const char* profile) {
    Timer timer;
    for (size_t c = 0; c < active_.size(); ++c) {
      if (active_[c] != 0 || left_[c] == 0) continue;
      RequestOptions ro;
      ro.sampling.temperature = 0;
      const int64_t id = next_++;
      ro.max_tokens = bench::request_tokens(o_, id);
      ro.ignore_eos = true;
      MTP_ASSIGN_OR_RETURN(active_[c], engine_.submit(tok_.encode(bench::sweep_prompt(id)), ro));
      --left_[c];
    }
    if (engine_.idle()) {
      done_ = true;
      return Status::Ok();
    }
    events_.clear();
    StepInfo info;
    MTP_RETURN_IF_ERROR(engine_.step(events_, &info));
    seconds_ += timer.seconds();
    if (o_.trace)
      std::fprintf(stderr,
                   "%-6s gen %2d rows %3lld prompt %3lld drafting %2d drafted %3lld accepted %3lld %7.1f ms"
                   " (draft %5.1f ms, %s head)\n",
                   profile, info.generating, static_cast<long long>(info.trunk_rows),
                   static_cast<long long>(info.prompt_rows), info.drafting,
                   static_cast<long long>(info.drafted), static_cast<long long>(info.accepted),
                   info.seconds * 1e3, info.draft_seconds * 1e3, speculative::draft_head_name(info.head));
    ByGenerating& g = by_gen_[info.generating];
    ++g.steps;
    g.drafted += info.drafted;
    g.seconds += info.seconds;
    drafted_ += info.drafted;
    accepted_ += info.accepted;
    drafted_by_head_[static_cast<size_t>(info.head)] += info.drafted;
    accepted_by_head_[static_cast<size_t>(info.head)] += info.accepted;
    for (const SlotEvent& e : events_) {
      tokens_ += static_cast<int64_t>(e.tokens.size());
      if (e.finish == FinishReason::kError) return Status(StatusCode::kInternal, e.error);
      if (e.finish != FinishReason::kNone)
        for (uint64_t& a : active_)
          if (a == e.request_id) a = 0;
    }
    return Status::Ok();
  }

 private:
  Engine& engine_;
  const Tokenizer& tok_;
  const Options& o_;
  std::vector<int> left_;
  std::vector<uint64_t> active_;
  std::vector<SlotEvent> events_;
  int next_ = 0;
  bool done_ = false;
  int64_t tokens_ = 0, drafted_ = 0, accepted_ = 0;
  std::array<int64_t, speculative::kDraftHeads> drafted_by_head_{}, accepted_by_head_{};
  double seconds_ = 0;
  std::map<int32_t, ByGenerating> by_gen_;
};

// Runs one Level per engine in lockstep until all are done.
Expected<std::vector<Level>> run_levels(const std::vector<std::unique_ptr<Engine>>& engines,
                                        const std::vector<std::string>& names, const Tokenizer& tok,
                                        int concurrency, const Options& o) {
  std::vector<Level> levels;
  for (const auto& e : engines) levels.emplace_back(*e, tok, concurrency, o);
  // Each round starts with the next engine, so none is always the one right after another's step.
  for (size_t round = 0, busy = 1; busy; ++round) {
    busy = 0;
    for (size_t j = 0; j < levels.size(); ++j) {
      const size_t i = (round + j) % levels.size();
      if (levels[i].done()) continue;
      MTP_RETURN_IF_ERROR(levels[i].step(names[i].c_str()));
      busy = 1;
    }
  }
  return levels;
}

EngineOptions engine_options(const Options& o, const std::string& profile, const Model& model,
                             const Tokenizer& tok) {
  EngineOptions eo;
  eo.n_ctx = o.n_ctx;
  eo.n_slots = o.n_slots;
  eo.end_tokens = default_end_tokens(model.vocab());
  eo.n_sample = tok.n_tokens();
  if (profile == "off") return eo;
  eo.spec = SpecType::kMtp;
  eo.draft.n_max = o.draft_max;
  eo.draft_vocab = o.draft_vocab;
  if (profile == "slots1") eo.policy.max_drafting_slots = 1;
  if (profile.rfind("auto", 0) == 0) eo.policy.kind = speculative::PolicyKind::kAuto;
  if (profile == "auto-full") eo.draft_head = speculative::DraftHead::kFull;
  if (profile == "auto-subset") eo.draft_head = speculative::DraftHead::kSubset;
  if (profile != "on" && profile != "slots1" && profile != "auto" && profile != "auto-full" &&
      profile != "auto-subset") {
    std::fprintf(stderr,
                 "engine_sweep: unknown profile '%s' (off, on, slots1, auto, auto-full, auto-subset)\n",
                 profile.c_str());
    std::exit(2);
  }
  return eo;
}

Status run(const Options& o) {
  ThreadPool pool(o.threads);
  MTP_ASSIGN_OR_RETURN(Model model, Model::load(o.model, &pool));
  MTP_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(model.vocab()));
  std::vector<std::unique_ptr<Engine>> engines;
  for (const std::string& p : o.profiles) {
    MTP_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                         Engine::create(model, engine_options(o, p, model, tok), pool));
    engines.push_back(std::move(engine));
  }
  Options warm = o;
  warm.rounds = 1;
  warm.trace = false;
  MTP_RETURN_IF_ERROR(run_levels(engines, o.profiles, tok, 1, warm).status());  // first touch, first costs
  std::map<std::string, std::vector<double>> tok_s;
  for (int64_t c : o.levels) {
    MTP_ASSIGN_OR_RETURN(std::vector<Level> levels,
                         run_levels(engines, o.profiles, tok, static_cast<int>(c), o));
    for (size_t i = 0; i < levels.size(); ++i) {
      const Level& l = levels[i];
      char acceptance[16] = "-";  // - : nothing drafted
      if (l.acceptance() >= 0) std::snprintf(acceptance, sizeof(acceptance), "%5.3f", l.acceptance());
      std::fprintf(stderr, "c%-2lld %-6s %7.2f tok/s, acceptance %s", static_cast<long long>(c),
                   o.profiles[i].c_str(), l.tok_s(), acceptance);
      if (l.drafted(speculative::DraftHead::kFull) > 0 && l.drafted(speculative::DraftHead::kSubset) > 0)
        for (speculative::DraftHead h : {speculative::DraftHead::kFull, speculative::DraftHead::kSubset})
          std::fprintf(stderr, " (%s head %.3f of %lld)", speculative::draft_head_name(h), l.acceptance(h),
                       static_cast<long long>(l.drafted(h)));
      std::fprintf(stderr, "; by generating slots (steps, ms, k):");
      for (const auto& [gen, g] : l.by_generating())
        std::fprintf(stderr, " %d:(%lld, %.0f, %.2f)", gen, static_cast<long long>(g.steps),
                     1e3 * g.seconds / static_cast<double>(g.steps),
                     gen > 0 ? static_cast<double>(g.drafted) / static_cast<double>(g.steps * gen) : 0.0);
      std::fprintf(stderr, "\n");
      tok_s[o.profiles[i]].push_back(l.tok_s());
      if (o.profiles[i].rfind("auto", 0) != 0) continue;
      // What the auto policy has learned so far: predicted trunk and draft-pass milliseconds by rows.
      const speculative::DraftPolicy& p = engines[i]->policy();
      std::fprintf(stderr, "    auto's model, ms by rows: plain");
      for (int64_t r : {1, 2, 4, 8, 16, 32, 64})
        std::fprintf(stderr, " %lld:%.0f", static_cast<long long>(r), 1e3 * p.predict_trunk(r));
      std::fprintf(stderr, "; verify (1 + 3 rows per slot)");
      for (int64_t r : {1, 2, 4, 8, 16})
        std::fprintf(stderr, " %lld:%.0f", static_cast<long long>(4 * r), 1e3 * p.predict_trunk(r, 3 * r));
      std::fprintf(stderr, "; draft pass");
      for (speculative::DraftHead h : {speculative::DraftHead::kFull, speculative::DraftHead::kSubset}) {
        if (!p.draft_cost(h).has_data()) continue;
        std::fprintf(stderr, "; %s head's draft pass", speculative::draft_head_name(h));
        for (int64_t r : {1, 2, 4, 8, 16, 32, 64})
          std::fprintf(stderr, " %lld:%.1f", static_cast<long long>(r), 1e3 * p.draft_cost(h).predict(r));
        std::fprintf(stderr, ", acceptance by position (all slots)");
        for (int32_t i = 0; i < o.draft_max; ++i) std::fprintf(stderr, " %.2f", p.acceptance(h).rate(i));
      }
      std::fprintf(stderr, "\n");
    }
  }
  std::printf("\n| profile |");
  for (int64_t c : o.levels) std::printf(" c%lld |", static_cast<long long>(c));
  std::printf(" vs off |\n|---|");
  for (size_t i = 0; i <= o.levels.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const std::string& p : o.profiles) {
    std::printf("| %s |", p.c_str());
    for (double t : tok_s[p]) std::printf(" %.2f |", t);
    if (tok_s.count("off"))
      for (size_t i = 0; i < o.levels.size(); ++i)
        std::printf(" %+.1f%%", 100.0 * (tok_s[p][i] / tok_s["off"][i] - 1.0));
    std::printf(" |\n");
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    try {
      if (bench::parse_sweep_flag(o, argc, argv, i)) continue;
      if (a == "--draft-vocab" && i + 1 < argc) {
        o.draft_vocab = bench::parse_int(argv[++i]);
        continue;
      }
      if (a == "--trace") {
        o.trace = true;
        continue;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "engine_sweep: %s: %s\n", a.c_str(), e.what());
      return 2;
    }
    bench::usage_or_exit("engine_sweep", a, "[--draft-vocab N] [--trace]");
  }
  if (o.model.empty()) {
    std::fprintf(stderr, "engine_sweep: -m MODEL is required\n");
    return 2;
  }
  if (const std::string e = bench::sweep_options_error(o); !e.empty()) {
    std::fprintf(stderr, "engine_sweep: %s\n", e.c_str());
    return 2;
  }
  const Status s = run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "engine_sweep: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
