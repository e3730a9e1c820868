// How often a model's MTP head agrees with its trunk: the acceptance a greedy speculative decoder would see
// at draft positions 1 and 2, measured with the reference forward (no engine needed). Used to calibrate `mtp
// synth --structured NOISE` and to check real heads.
//
// Usage: mtp_agreement MODEL [n_tokens=200] [prompt="The model"] [threads=2] [--temp 1] [--text FILE]
// --text FILE: the first n_tokens tokens of FILE instead of a greedy generation (the trunk reads the text,
// drafts are checked against its next tokens): acceptance on real content rather than on the model's own
// greedy output, which repeats itself.
// Protocol: generate n_tokens greedily with the trunk, keeping every post-norm hidden h_p. Then for each
// position p, the MTP row (h_{p-1}, x_p) at p drafts d1 for p+1 (accepted if it equals the trunk's x_{p+1});
// when d1 is accepted, the row (h_mtp, d1) at p+1 drafts d2 (accepted if it equals x_{p+2}). Each next
// position's row overwrites the draft rows, as a decoder's catch-up does.
// Sampling at --temp T, position 1 only: with the trunk's distribution p and the head's q (both softmax at T)
// over x_{p+1}, the acceptance a decoder drafting the head's argmax d and keeping it when the target's sample
// equals it would see, p(d), against the acceptance of drafts sampled from q and kept by rejection sampling,
// sum_x min(p(x), q(x)); both are exact expectations at each position, averaged.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "base/text_file.h"
#include "base/timer.h"
#include "model/model.h"
#include "model/reference_forward.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using namespace mtp;
  std::string path, prompt = "The model", text_file;
  int n_tokens = 200, threads = 2;
  double temp = 1.0;
  CLI::App app{"How often the MTP head's drafts match the trunk's greedy tokens, at draft positions 1 and 2",
               "mtp_agreement"};
  app.add_option("model", path, "GGUF model with an MTP block")->required();
  app.add_option("n_tokens", n_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("prompt", prompt, "Prompt text")->capture_default_str();
  app.add_option("threads", threads, "Threads")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--text", text_file, "Measure on this file's tokens instead of a greedy generation")
      ->check(CLI::ExistingFile);
  app.add_option("--temp", temp, "Temperature of the sampled acceptance figures")
      ->check(CLI::Range(0.01, 100.0))
      ->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  ThreadPool pool(threads);
  auto model = Model::load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  if (!model->has_mtp()) {
    std::fprintf(stderr, "%s has no MTP block\n", path.c_str());
    return 1;
  }
  auto tok = Tokenizer::create(model->vocab());
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().message().c_str());
    return 1;
  }
  auto argmax = [](const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  auto softmax_at = [&](const std::vector<float>& logits) {
    std::vector<double> pr(logits.size());
    const double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (size_t i = 0; i < pr.size(); ++i) sum += pr[i] = std::exp((logits[i] - top) / temp);
    for (double& v : pr) v /= sum;
    return pr;
  };

  Timer timer;
  ReferenceState state(model->config());
  std::vector<int32_t> x = tok->encode(prompt);
  size_t n_prompt = x.size();
  if (!text_file.empty()) {
    Expected<std::string> body = read_text_file(text_file);
    if (!body.ok()) {
      std::fprintf(stderr, "mtp_agreement: %s\n", body.status().message().c_str());
      return 1;
    }
    EncodeOptions e;
    e.parse_special = false;
    x = tok->encode(*body, e);
    if (x.size() < 4) {
      std::fprintf(stderr, "mtp_agreement: %s: fewer than 4 tokens\n", text_file.c_str());
      return 1;
    }
    x.resize(std::min(x.size(), static_cast<size_t>(n_tokens)));
    n_prompt = 1;  // every position after the first is measured; nothing is generated
  }
  const size_t n_steps = text_file.empty() ? n_prompt + static_cast<size_t>(n_tokens) : x.size();
  std::vector<std::vector<float>> h;      // h[p]: post-norm hidden after token x[p]
  std::vector<std::vector<float>> trunk;  // trunk[p]: the trunk's logits for x[p+1], generated positions only
  for (size_t p = 0; p < n_steps; ++p) {
    ForwardOutput out = forward_token(*model, state, x[p], static_cast<int64_t>(p), true, &pool);
    h.push_back(std::move(out.hidden));
    trunk.push_back(p + 1 >= n_prompt ? std::move(out.logits) : std::vector<float>());
    if (text_file.empty() && p + 1 >= x.size()) x.push_back(argmax(trunk.back()));
  }
  const double trunk_s = timer.seconds();

  int drafted1 = 0, accepted1 = 0, drafted2 = 0, accepted2 = 0;
  double kept_argmax = 0, kept_sampled = 0;  // sums over the drafted positions of p(d) and sum min(p, q)
  for (size_t p = 1; p + 2 < x.size(); ++p) {
    ForwardOutput d1 = mtp_draft_logits(*model, state, h[p - 1], x[p], static_cast<int64_t>(p), true, &pool);
    if (p < n_prompt) continue;  // catch-up over the prompt; count drafts only inside the generation
    ++drafted1;
    const std::vector<double> pt = softmax_at(trunk[p]), q = softmax_at(d1.logits);
    kept_argmax += pt[static_cast<size_t>(argmax(d1.logits))];
    for (size_t i = 0; i < pt.size(); ++i) kept_sampled += std::min(pt[i], q[i]);
    if (argmax(d1.logits) != x[p + 1]) continue;
    ++accepted1;
    ForwardOutput d2 =
        mtp_draft_logits(*model, state, d1.hidden, x[p + 1], static_cast<int64_t>(p + 1), true, &pool);
    ++drafted2;
    if (argmax(d2.logits) == x[p + 2]) ++accepted2;
  }
  std::string text = tok->decode({x.data() + n_prompt, std::min<size_t>(x.size() - n_prompt, 60)});
  for (char& c : text) c = (c == '\n') ? ' ' : c;
  std::printf("model %s: %zu %s tokens (trunk %.1f s)\n", path.c_str(), x.size() - n_prompt,
              text_file.empty() ? "generated" : "text", trunk_s);
  std::printf("text: %s...\n", text.c_str());
  std::printf("draft position 1: %d/%d accepted (%.3f)\n", accepted1, drafted1,
              drafted1 ? static_cast<double>(accepted1) / drafted1 : 0.0);
  std::printf("draft position 2: %d/%d accepted given position 1 (%.3f)\n", accepted2, drafted2,
              drafted2 ? static_cast<double>(accepted2) / drafted2 : 0.0);
  if (drafted1 > 0)
    std::printf(
        "sampling at T=%.2f, position 1: the head's argmax kept %.3f; drafts sampled from the head, "
        "rejection sampling %.3f\n",
        temp, kept_argmax / drafted1, kept_sampled / drafted1);
  return 0;
}
