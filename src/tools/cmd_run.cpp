// `mtp run -m MODEL -p PROMPT -n N`: generate text with the reference forward pass (one token at a time, f32,
// no speculation). The prompt is tokenized with control tokens matched, fed position by position, then N
// tokens are sampled (greedy by default) and streamed to stdout as they complete UTF-8 characters.
//
// --dump-logits FILE writes raw little-endian float32 logits, one row of n_vocab per position: the prompt's
// positions first, then one row per generated token (the logits after feeding it). A run that generates G
// tokens writes (n_prompt + G) * n_vocab floats; G < N only when EOS stops it (EOS itself is neither printed
// nor fed).
#include <bit>
#include <cstdio>
#include <memory>

#include "base/atomic_file.h"
#include "base/timer.h"
#include "command.h"
#include "model/model.h"
#include "model/reference_forward.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"

namespace mtp::tools {
namespace {

static_assert(std::endian::native == std::endian::little, "--dump-logits writes the host's float bytes");

struct RunArgs {
  std::string model;
  std::string prompt;
  int n_predict = 32;
  SamplerOptions sampler;
  bool ignore_eos = false;
  std::string dump_logits;
  int threads = 0;
};

Status write_row(AtomicFile* dump, const std::vector<float>& logits) {
  if (dump == nullptr) return Status::Ok();
  return dump->write({reinterpret_cast<const uint8_t*>(logits.data()), logits.size() * sizeof(float)});
}

double per_second(int64_t n, double seconds) {
  return seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
}

Status run(const RunArgs& a) {
  if (a.n_predict < 0) return invalid_argument("-n must be >= 0, got ", a.n_predict);
  if (a.sampler.temperature < 0) return invalid_argument("--temp must be >= 0");
  if (!(a.sampler.top_p > 0.0f && a.sampler.top_p <= 1.0f))
    return invalid_argument("--top-p must be in (0, 1]");

  ThreadPool pool(a.threads);
  MTP_ASSIGN_OR_RETURN(Model model, Model::load(a.model));
  if (model.vocab().tokens.empty()) return unsupported(a.model, ": the file has no tokenizer");
  MTP_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(model.vocab()));
  EncodeOptions enc;
  enc.parse_special = true;
  const std::vector<int32_t> prompt = tok.encode(a.prompt, enc);
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");

  std::optional<AtomicFile> dump;
  if (!a.dump_logits.empty()) {
    MTP_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(a.dump_logits));
    dump.emplace(std::move(f));
  }
  AtomicFile* dump_ptr = dump ? &*dump : nullptr;

  // Prompt: logits are needed only for the last position, unless they are all being dumped.
  ReferenceState state(model.config());
  ForwardOutput out;
  Timer prompt_timer;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const bool want = dump_ptr != nullptr || i + 1 == prompt.size();
    out = forward_token(model, state, prompt[i], static_cast<int64_t>(i), want, &pool);
    if (dump_ptr != nullptr) MTP_RETURN_IF_ERROR(write_row(dump_ptr, out.logits));
  }
  const double prompt_s = prompt_timer.seconds();

  // Generation. Ids past the tokenizer's table (padding rows of the embedding) are never sampled.
  const size_t n_sample = std::min<size_t>(out.logits.size(), static_cast<size_t>(tok.n_tokens()));
  Sampler sampler(a.sampler);
  StreamDecoder decoder(tok);
  int64_t n_gen = 0;
  Timer gen_timer;
  while (n_gen < a.n_predict) {
    const int32_t id = sampler.sample(std::span<const float>(out.logits).first(n_sample));
    if (!a.ignore_eos && tok.eos() && id == *tok.eos()) break;
    ++n_gen;
    const std::string text = decoder.push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    out = forward_token(model, state, id, state.n_past, true, &pool);
    MTP_RETURN_IF_ERROR(write_row(dump_ptr, out.logits));
  }
  const double gen_s = gen_timer.seconds();
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (dump_ptr != nullptr) MTP_RETURN_IF_ERROR(dump_ptr->commit());

  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s (%.2f tok/s); generation: %lld tokens in %.3f s (%.2f tok/s)\n",
               prompt.size(), prompt_s, per_second(static_cast<int64_t>(prompt.size()), prompt_s),
               static_cast<long long>(n_gen), gen_s, per_second(n_gen, gen_s));
  return Status::Ok();
}

}  // namespace

CommandRunner register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd =
      app.add_subcommand("run", "Generate text with the reference (f32, one token at a time) engine");
  cmd->add_option("-m,--model", a->model, "GGUF model file (qwen35moe)")->required();
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text; control tokens like <|im_start|> are matched")
      ->required();
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", a->sampler.temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampler.top_k, "Keep the k most likely tokens; 0 = all")
      ->capture_default_str();
  cmd->add_option("--top-p", a->sampler.top_p, "Nucleus: keep the smallest set with this much probability")
      ->capture_default_str();
  cmd->add_option("--seed", a->sampler.seed, "Sampling seed; the same seed gives the same tokens")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->add_option("--dump-logits", a->dump_logits,
                  "Write every position's logits here: raw little-endian float32, one row of n_vocab per "
                  "position, prompt positions then generated ones");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a] {
    Status s = run(*a);
    return s.ok() ? kExitOk : report_error("run", s);
  };
}

}  // namespace mtp::tools
