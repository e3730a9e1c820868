// Tokenizer throughput with a model's vocabulary: encode, decode and streaming decode (the server's path, one
// token at a time) of a text corpus, in MB/s of text (1 MB = 10^6 bytes) and tokens/s, one table row per
// GGUF. Each measurement repeats whole passes over the text until --seconds have passed (at least one pass),
// so a run takes about 3 x --seconds per model plus the vocabulary loads.
//
//   tokenizer_bench [MODEL.gguf ...] [--corpus FILE] [--mb N] [--seconds S]
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "base/timer.h"
#include "gguf/gguf_file.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace mtp;

struct Options {
  std::vector<std::string> models = {"tests/data/example.gguf"};
  std::string corpus;  // empty: the tokenizer library's bundled corpus
  double megabytes = 1;
  double seconds = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"Encode and decode throughput of the tokenizer with each model's vocabulary",
               "tokenizer_bench"};
  app.add_option("models", o.models, "GGUF files whose tokenizer.ggml.* vocabulary is used")
      ->capture_default_str();
  app.add_option("--corpus", o.corpus, "Text file (default: the bundled training corpus)");
  app.add_option("--mb", o.megabytes, "Megabytes of text: the corpus repeated up to this size")
      ->check(CLI::Range(0.001, 1e4))
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "Minimum time of each measurement (one pass at least)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  return o;
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tokenizer_bench: %s\n", message.c_str());
  std::exit(1);
}

std::string load_corpus(const Options& o) {
  std::string unit(builtin_training_corpus());
  if (!o.corpus.empty()) {
    std::ifstream in(o.corpus, std::ios::binary);
    if (!in) fail(o.corpus + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    unit = text.str();
    if (unit.empty()) fail(o.corpus + ": empty");
  }
  std::string text;
  while (static_cast<double>(text.size()) < o.megabytes * 1e6) text += unit;
  return text;
}

// Seconds per pass of `fn`, over as many passes as fit in `min_seconds` (one at least).
template <typename Fn>
double seconds_per_pass(double min_seconds, const Fn& fn) {
  Timer t;
  int passes = 0;
  do {
    fn();
    ++passes;
  } while (t.seconds() < min_seconds);
  return t.seconds() / passes;
}

Tokenizer load_tokenizer(const std::string& path, double* load_seconds) {
  auto file = GgufFile::open(path);
  if (!file.ok()) fail(file.status().message());
  Timer t;
  auto vocab = vocab_from_gguf(file->metadata());
  if (!vocab.ok()) fail(path + ": " + vocab.status().message());
  auto tok = Tokenizer::create(std::move(vocab).value());
  if (!tok.ok()) fail(path + ": " + tok.status().message());
  *load_seconds = t.seconds();
  return std::move(tok).value();
}

void bench_model(const std::string& path, const std::string& text, double min_seconds) {
  double load_s = 0;
  const Tokenizer tok = load_tokenizer(path, &load_s);
  EncodeOptions raw;  // the text as a user's content: no control tokens, no BOS/EOS
  raw.parse_special = false;
  raw.add_bos = false;
  raw.add_eos = false;
  std::vector<int32_t> ids;
  const double enc_s = seconds_per_pass(min_seconds, [&] { ids = tok.encode(text, raw); });
  std::string back;
  const double dec_s = seconds_per_pass(min_seconds, [&] { back = tok.decode(ids); });
  size_t streamed = 0;
  const double stream_s = seconds_per_pass(min_seconds, [&] {
    StreamDecoder d(tok);
    streamed = 0;
    for (int32_t id : ids) streamed += d.push(id).size();
    streamed += d.flush().size();
  });
  // NFC normalization may change text that is not in NFC, so a difference is reported, not an error.
  const bool round_trip = back == text && streamed == text.size();
  const double mb = static_cast<double>(text.size()) / 1e6, n = static_cast<double>(ids.size());
  std::printf("%-32s %8d %7.3f %9.2f %11.0f %9.2f %11.0f %9.2f %11.0f %7.2f %s\n", path.c_str(),
              tok.n_tokens(), load_s, mb / enc_s, n / enc_s, mb / dec_s, n / dec_s, mb / stream_s,
              n / stream_s, static_cast<double>(text.size()) / n, round_trip ? "yes" : "NO");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const std::string text = load_corpus(opt);
  std::printf("text: %.2f MB (%s), at least %.2f s per measurement\n", static_cast<double>(text.size()) / 1e6,
              opt.corpus.empty() ? "the bundled corpus, repeated" : opt.corpus.c_str(), opt.seconds);
  std::printf("%-32s %8s %7s %9s %11s %9s %11s %9s %11s %7s %s\n", "model", "vocab", "load", "encode",
              "encode", "decode", "decode", "stream", "stream", "bytes/", "round");
  std::printf("%-32s %8s %7s %9s %11s %9s %11s %9s %11s %7s %s\n", "", "tokens", "s", "MB/s", "tokens/s",
              "MB/s", "tokens/s", "MB/s", "tokens/s", "token", "trip");
  for (const std::string& path : opt.models) bench_model(path, text, opt.seconds);
  return 0;
}
