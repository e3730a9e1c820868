// `mtp perplexity -m MODEL -f TEXT`: perplexity over a text in chunks of -c tokens, scoring the second half
// of each chunk as llama-perplexity does. `--kl-divergence-base FILE` also writes every scored position's
// log-probabilities in llama.cpp's base-file format (eval/kld_file.h); with `--kl-divergence` the file is
// read instead and the model is compared with it: llama-perplexity's KL-divergence statistics, plus the same
// by context depth. `--json` prints one JSON line for machines (and `mtp gate run`).
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/timer.h"
#include "command.h"
#include "eval/kld_file.h"
#include "eval/kld_stats.h"
#include "eval/kld_topk.h"
#include "eval/perplexity.h"
#include "loadgen/record.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mtp::tools {
namespace {

using Json = nlohmann::ordered_json;

struct PerplexityArgs {
  std::string model, text_file, base_file;
  bool kl_divergence = false;
  bool json = false;
  bool ctx_given = false;
  int64_t n_ctx = 512, n_batch = 512, chunks = -1;
  int depth_buckets = 4;
  int threads = 0;
  int top_k = 0;  // > 0: write the compact top-k base instead of llama.cpp's full rows
};

Status check_args(const PerplexityArgs& a) {
  if (a.n_ctx < 4 || a.n_ctx > (1 << 20))
    return invalid_argument("-c must be in 4 .. 1048576, got ", a.n_ctx);
  if (a.n_batch < 1) return invalid_argument("-b must be at least 1, got ", a.n_batch);
  if (a.chunks == 0 || a.chunks < -1) return invalid_argument("--chunks must be positive (or -1: all)");
  if (a.depth_buckets < 1) return invalid_argument("--depth-buckets must be at least 1");
  if (a.top_k < 0) return invalid_argument("--kld-top-k must be positive, got ", a.top_k);
  if (a.top_k > 0 && (a.base_file.empty() || a.kl_divergence)) {
    return invalid_argument(
        "--kld-top-k sets the format of the base file written with --kl-divergence-base (without "
        "--kl-divergence; a base is read in whichever format it has)");
  }
  if (a.kl_divergence && a.base_file.empty())
    return invalid_argument("--kl-divergence reads the file named by --kl-divergence-base; give one");
  if (!a.kl_divergence && a.text_file.empty())
    return invalid_argument("-f TEXT is required (except with --kl-divergence, which has the base's tokens)");
  return Status::Ok();
}

Expected<std::vector<int32_t>> tokenize_file(const std::string& path, const Tokenizer& tok) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  EncodeOptions enc;
  enc.parse_special = false;  // llama-perplexity treats the text as plain text
  return tok.encode(ss.str(), enc);
}

Json estimate_json(const eval::Estimate& e) {
  return {{"value", e.value}, {"err", e.err}};
}

// The scored rows of one chunk, computed on the pool; `fn(row)` for row 0 .. scored-1.
void for_rows(ThreadPool& pool, int64_t rows, const std::function<void(int64_t)>& fn) {
  pool.parallel_for(static_cast<size_t>(rows), [&](size_t r, int) { fn(static_cast<int64_t>(r)); });
}

// Plain perplexity, and the base file when one is named.
Status run_perplexity(const PerplexityArgs& a, const Model& model, const std::vector<int32_t>& tokens,
                      ThreadPool& pool, Json& j) {
  const eval::ChunkOptions co{a.n_ctx, a.n_batch, a.chunks};
  if (static_cast<int64_t>(tokens.size()) < 2 * a.n_ctx) {
    return unsupported(a.text_file, ": ", tokens.size(), " tokens; -c ", a.n_ctx, " needs at least ",
                       2 * a.n_ctx, " (two chunks), as llama-perplexity");
  }
  const int64_t n_chunk = eval::chunk_count(static_cast<int64_t>(tokens.size()), co);
  const int64_t n_vocab = model.config().n_vocab, first = a.n_ctx / 2;
  const int64_t scored = eval::kld_scored_per_chunk(a.n_ctx), words = eval::kld_row_words(n_vocab);
  if (a.top_k > n_vocab)
    return invalid_argument("--kld-top-k ", a.top_k, " is more than the model's vocabulary of ", n_vocab);
  std::optional<eval::KldBaseWriter> writer;
  std::optional<eval::TopKBaseWriter> topk_writer;
  const std::span<const int32_t> evaluated(tokens.data(), static_cast<size_t>(n_chunk * a.n_ctx));
  if (!a.base_file.empty() && a.top_k == 0) {
    MTP_ASSIGN_OR_RETURN(eval::KldBaseWriter w,
                         eval::KldBaseWriter::create(a.base_file, static_cast<int32_t>(a.n_ctx),
                                                     static_cast<int32_t>(n_vocab), evaluated));
    writer.emplace(std::move(w));
  } else if (!a.base_file.empty()) {
    MTP_ASSIGN_OR_RETURN(eval::TopKBaseWriter w,
                         eval::TopKBaseWriter::create(a.base_file, static_cast<int32_t>(a.n_ctx),
                                                      static_cast<int32_t>(n_vocab), a.top_k, evaluated));
    topk_writer.emplace(std::move(w));
  }
  const int64_t topk_words = eval::topk_row_words(a.top_k);
  std::vector<uint16_t> rows(static_cast<size_t>(topk_writer ? 0 : scored * words));
  std::vector<uint32_t> topk_rows(static_cast<size_t>(topk_writer ? scored * topk_words : 0));
  std::vector<double> nll(static_cast<size_t>(scored));
  eval::PplAccumulator acc;
  Timer timer;
  MTP_RETURN_IF_ERROR(
      eval::evaluate_chunks(model, tokens, co, pool, [&](int64_t c, std::span<const float> logits) -> Status {
        const int32_t* next = tokens.data() + c * a.n_ctx + first + 1;
        for_rows(pool, scored, [&](int64_t r) {
          const auto row_logits =
              logits.subspan(static_cast<size_t>(r * n_vocab), static_cast<size_t>(n_vocab));
          nll[static_cast<size_t>(r)] =
              topk_writer
                  ? eval::encode_top_k(row_logits, next[r], a.top_k,
                                       std::span(topk_rows).subspan(static_cast<size_t>(r * topk_words),
                                                                    static_cast<size_t>(topk_words)))
                  : eval::encode_log_probs(
                        row_logits, next[r],
                        std::span(rows).subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)));
        });
        for (const double v : nll) acc.add(v);
        if (writer) MTP_RETURN_IF_ERROR(writer->write_chunk(rows));
        if (topk_writer) MTP_RETURN_IF_ERROR(topk_writer->write_chunk(topk_rows));
        std::fprintf(stderr, "perplexity: chunk %lld/%lld, PPL %.4f (%.1f s)\n",
                     static_cast<long long>(c + 1), static_cast<long long>(n_chunk), acc.ppl().value,
                     timer.seconds());
        return Status::Ok();
      }));
  if (writer) MTP_RETURN_IF_ERROR(writer->commit());
  if (topk_writer) MTP_RETURN_IF_ERROR(topk_writer->commit());
  const eval::Estimate ppl = acc.ppl();
  j["n_chunks"] = n_chunk;
  j["scored"] = acc.count;
  j["ppl"] = estimate_json(ppl);
  if (!a.base_file.empty()) j["kl_divergence_base"] = a.base_file;
  if (topk_writer) j["base_top_k"] = a.top_k;
  if (!a.json) std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl.value, ppl.err);
  return Status::Ok();
}

// A base file in either format: llama.cpp's full rows, or the compact top-k rows (told apart by the magic).
class BaseRows {
 public:
  static Expected<BaseRows> open(const std::string& path) {
    BaseRows b;
    if (eval::is_topk_base(path)) {
      MTP_ASSIGN_OR_RETURN(eval::TopKBaseFile f, eval::TopKBaseFile::open(path));
      b.topk_.emplace(std::move(f));
    } else {
      MTP_ASSIGN_OR_RETURN(eval::KldBaseFile f, eval::KldBaseFile::open(path));
      b.full_.emplace(std::move(f));
    }
    return b;
  }
  int32_t n_ctx() const { return full_ ? full_->n_ctx() : topk_->n_ctx(); }
  int32_t n_vocab() const { return full_ ? full_->n_vocab() : topk_->n_vocab(); }
  std::span<const int32_t> tokens() const { return full_ ? full_->tokens() : topk_->tokens(); }
  const std::string& path() const { return full_ ? full_->path() : topk_->path(); }
  int32_t top_k() const { return topk_ ? topk_->top_k() : 0; }  // 0: full rows
  // Scored row r of chunk c against the model's logits there.
  eval::TokenComparison compare(int32_t c, int64_t r, std::span<const float> logits, int32_t next) const {
    if (full_)
      return eval::compare_log_probs(logits, row(full_->chunk_rows(c), eval::kld_row_words(n_vocab()), r),
                                     next);
    return eval::compare_top_k(logits, row(topk_->chunk_rows(c), eval::topk_row_words(top_k()), r), next);
  }
  // The base's mass outside its top k at that row (compact files only).
  double rest_mass(int32_t c, int64_t r) const {
    return eval::topk_rest_mass(row(topk_->chunk_rows(c), eval::topk_row_words(top_k()), r));
  }

 private:
  template <typename Word>
  static std::span<const Word> row(std::span<const Word> rows, int64_t words, int64_t r) {
    return rows.subspan(static_cast<size_t>(r * words), static_cast<size_t>(words));
  }
  std::optional<eval::KldBaseFile> full_;
  std::optional<eval::TopKBaseFile> topk_;
};

Status check_tokens(const PerplexityArgs& a, const BaseRows& base, const Tokenizer& tok) {
  if (a.text_file.empty()) return Status::Ok();
  MTP_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tokenize_file(a.text_file, tok));
  const std::span<const int32_t> want = base.tokens();
  for (size_t i = 0; i < want.size(); ++i) {
    if (i >= tokens.size()) {
      return unsupported(a.text_file, ": ", tokens.size(), " tokens, but ", base.path(), " evaluated ",
                         want.size(), ": not the text of that base file");
    }
    if (tokens[i] != want[i]) {
      return unsupported(a.text_file, ": token ", i, " is ", tokens[i], " but ", base.path(), " has ",
                         want[i], ": not the text (or the tokenizer) of that base file");
    }
  }
  return Status::Ok();
}

Json summary_json(const eval::KldSummary& s) {
  Json j;
  j["ppl"] = estimate_json(s.ppl);
  j["ppl_base"] = estimate_json(s.ppl_base);
  j["ppl_correlation"] = s.ppl_correlation;
  j["ln_ppl_ratio"] = estimate_json(s.ln_ppl_ratio);
  j["ppl_ratio"] = estimate_json(s.ppl_ratio);
  j["kld"] = {{"mean", s.kld.value}, {"err", s.kld.err}, {"min", s.kld_min},       {"p01", s.kld_p01},
              {"p05", s.kld_p05},    {"p10", s.kld_p10}, {"median", s.kld_median}, {"p90", s.kld_p90},
              {"p95", s.kld_p95},    {"p99", s.kld_p99}, {"p999", s.kld_p999},     {"max", s.kld_max}};
  j["same_top"] = {{"count", s.same_top}, {"rate", s.same_top_rate.value}, {"err", s.same_top_rate.err}};
  j["delta_p_rms"] = estimate_json(s.delta_p_rms);
  j["depth"] = Json::array();
  for (const eval::DepthBucket& d : s.depth) {
    j["depth"].push_back({{"first_depth", d.first_depth},
                          {"last_depth", d.last_depth},
                          {"tokens", d.tokens},
                          {"kld_mean", d.kld_mean},
                          {"same_top_rate", d.same_top_rate},
                          {"ln_ppl_ratio", d.ln_ppl_ratio}});
  }
  return j;
}

void print_summary(const eval::KldSummary& s) {
  std::printf("====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", s.ppl.value, s.ppl.err);
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", s.ppl_base.value, s.ppl_base.err);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s.ppl_correlation);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s.ln_ppl_ratio.value, s.ln_ppl_ratio.err);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n\n", s.ppl_ratio.value, s.ppl_ratio.err);
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", s.kld.value, s.kld.err);
  const std::pair<const char*, double> rows[] = {
      {"Maximum", s.kld_max}, {"99.9%  ", s.kld_p999},   {"99.0%  ", s.kld_p99}, {"95.0%  ", s.kld_p95},
      {"90.0%  ", s.kld_p90}, {"Median ", s.kld_median}, {"10.0%  ", s.kld_p10}, {" 5.0%  ", s.kld_p05},
      {" 1.0%  ", s.kld_p01}, {"Minimum", s.kld_min}};
  for (const auto& [name, v] : rows) std::printf("%s KLD: %10.6f\n", name, v);
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * s.delta_p_rms.value, 100.0 * s.delta_p_rms.err);
  std::printf("Same top p: %6.3f ± %5.3f %%\n\n", 100.0 * s.same_top_rate.value, 100.0 * s.same_top_rate.err);
  std::printf("====== By context depth (tokens seen) ======\n");
  std::printf("%-13s %8s %12s %10s %14s\n", "depth", "tokens", "mean KLD", "same top", "ln PPL ratio");
  for (const eval::DepthBucket& d : s.depth) {
    const std::string range = str_cat(d.first_depth, "-", d.last_depth);
    std::printf("%-13s %8lld %12.6f %9.3f%% %14.6f\n", range.c_str(), static_cast<long long>(d.tokens),
                d.kld_mean, 100.0 * d.same_top_rate, d.ln_ppl_ratio);
  }
}

// The model against a base file.
Status run_kl_divergence(const PerplexityArgs& a, const Model& model, const Tokenizer& tok, ThreadPool& pool,
                         Json& j) {
  MTP_ASSIGN_OR_RETURN(BaseRows base, BaseRows::open(a.base_file));
  const int64_t n_vocab = model.config().n_vocab;
  if (base.n_vocab() != n_vocab) {
    return unsupported(a.base_file, ": a vocabulary of ", base.n_vocab(), ", but ", a.model, " has ", n_vocab,
                       ": base and model must share the vocabulary");
  }
  if (a.ctx_given && a.n_ctx != base.n_ctx()) {
    return invalid_argument("-c ", a.n_ctx, " but ", a.base_file, " was computed with ", base.n_ctx(),
                            ": the context comes from the base file (drop -c)");
  }
  MTP_RETURN_IF_ERROR(check_tokens(a, base, tok));
  const eval::ChunkOptions co{base.n_ctx(), a.n_batch, a.chunks};
  const int64_t n_chunk = eval::chunk_count(static_cast<int64_t>(base.tokens().size()), co);
  const int64_t first = base.n_ctx() / 2, scored = eval::kld_scored_per_chunk(base.n_ctx());
  eval::KldAccumulator acc(base.n_ctx(), a.depth_buckets);
  std::vector<eval::TokenComparison> cmp(static_cast<size_t>(scored));
  double rest_mass = 0;  // summed over the scored rows of a compact base
  Timer timer;
  MTP_RETURN_IF_ERROR(eval::evaluate_chunks(
      model, base.tokens(), co, pool, [&](int64_t c, std::span<const float> logits) -> Status {
        const int32_t* next = base.tokens().data() + c * base.n_ctx() + first + 1;
        const int32_t chunk = static_cast<int32_t>(c);
        for_rows(pool, scored, [&](int64_t r) {
          cmp[static_cast<size_t>(r)] = base.compare(
              chunk, r, logits.subspan(static_cast<size_t>(r * n_vocab), static_cast<size_t>(n_vocab)),
              next[r]);
        });
        for (int64_t r = 0; r < scored; ++r) acc.add(cmp[static_cast<size_t>(r)], first + r);
        for (int64_t r = 0; r < scored && base.top_k() > 0; ++r) rest_mass += base.rest_mass(chunk, r);
        const eval::KldSummary so_far = acc.summary();
        std::fprintf(stderr, "kl-divergence: chunk %lld/%lld, PPL %.4f, mean KLD %.6f (%.1f s)\n",
                     static_cast<long long>(c + 1), static_cast<long long>(n_chunk), so_far.ppl.value,
                     so_far.kld.value, timer.seconds());
        return Status::Ok();
      }));
  const eval::KldSummary s = acc.summary();
  j["kl_divergence_base"] = a.base_file;
  j["n_ctx"] = base.n_ctx();
  j["n_vocab"] = n_vocab;
  j["n_chunks"] = n_chunk;
  j["scored"] = s.scored;
  j.update(summary_json(s));
  if (base.top_k() > 0) {
    // A compact base: the KLD is a lower bound, short by at most this mass times the tails' own KLD.
    j["base_top_k"] = base.top_k();
    j["base_rest_mass_mean"] = s.scored > 0 ? rest_mass / static_cast<double>(s.scored) : 0.0;
  }
  if (!a.json) {
    print_summary(s);
    if (base.top_k() > 0) {
      std::printf(
          "\nCompact base: the top %d tokens per position, mean mass outside them %.6f; the KLD above is "
          "that of the top %d and one bin for the rest, a lower bound of the full KLD\n",
          base.top_k(), j["base_rest_mass_mean"].get<double>(), base.top_k());
    }
  }
  return Status::Ok();
}

Status run(PerplexityArgs a) {
  MTP_RETURN_IF_ERROR(check_args(a));
  Json j;
  j["tool"] = "mtp perplexity";
  j["start_utc"] = loadgen::utc_now();
  j["model"] = a.model;
  if (!a.text_file.empty()) j["text"] = a.text_file;
  ThreadPool pool(a.threads);
  MTP_ASSIGN_OR_RETURN(Model model, Model::load(a.model, "", &pool));
  if (model.vocab().tokens.empty()) return unsupported(a.model, ": the file has no tokenizer");
  MTP_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(model.vocab()));
  if (a.kl_divergence) {
    MTP_RETURN_IF_ERROR(run_kl_divergence(a, model, tok, pool, j));
  } else {
    MTP_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tokenize_file(a.text_file, tok));
    j["n_ctx"] = a.n_ctx;
    MTP_RETURN_IF_ERROR(run_perplexity(a, model, tokens, pool, j));
  }
  if (a.json) std::printf("%s\n", j.dump().c_str());
  return Status::Ok();
}

}  // namespace

CommandRunner register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity over a text, and KL divergence against a base model's logits (llama.cpp's file)");
  cmd->add_option("-m,--model", a->model, "GGUF model file (qwen35moe)")->required();
  cmd->add_option(
      "-f,--file", a->text_file,
      "Text to evaluate (with --kl-divergence: optional, checked against the base file's tokens)");
  CLI::Option* ctx = cmd->add_option("-c,--ctx-size", a->n_ctx, "Tokens per chunk; the second half is scored")
                         ->capture_default_str();
  cmd->add_option("-b,--batch-size", a->n_batch, "Rows per forward pass")->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "Evaluate at most this many chunks (-1: all)")
      ->capture_default_str();
  cmd->add_option("--kl-divergence-base", a->base_file,
                  "Write every scored position's log-probabilities here (llama-perplexity's format); with "
                  "--kl-divergence, read them from here");
  cmd->add_flag("--kl-divergence", a->kl_divergence,
                "Compare the model with the --kl-divergence-base file: KLD, same top token, PPL ratio");
  cmd->add_option("--depth-buckets", a->depth_buckets,
                  "Context-depth ranges the scored half of a chunk is split into for the breakdown")
      ->capture_default_str();
  cmd->add_option(
      "--kld-top-k", a->top_k,
      "Write a compact base with only the top K log-probabilities per position and the rest's mass "
      "(docs/perplexity.md); its KLD is a lower bound of the full one");
  cmd->add_flag("--json", a->json, "Print one JSON line (the statistics) instead of the text report");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a, ctx] {
    a->ctx_given = ctx->count() > 0;
    Status s = run(*a);
    return s.ok() ? kExitOk : report_error("perplexity", s);
  };
}

}  // namespace mtp::tools
