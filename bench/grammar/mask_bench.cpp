// Token-mask time per decode step: a typical tool's JSON Schema compiled to GBNF, a JSON document that
// satisfies it cut into tokens (longest match in the vocabulary), and at each step the mask over the whole
// vocabulary (fill_token_mask) timed before the step's token is taken. Run 1 starts from a fresh matcher (its
// automaton is built as it goes); later runs reuse it, as one request's later steps and a server's later
// requests with the same schema would. A program printing numbers, not a test.
//
//   mask_bench [--vocab 248320] [--model MODEL.gguf] [--runs 3] [--seed 1] [--no-cache]
//
// Each run keeps long walks' masks in a fresh TokenMaskCache, as the engine does for each request;
// --no-cache walks the trie at every step.
//
// Without --model the vocabulary is synthetic: the 256 single bytes, then BPE-like pieces (words with and
// without a leading space, capitalised, digit runs, JSON punctuation runs, whitespace runs, CJK characters)
// up to --vocab tokens. With --model it is that file's vocabulary (control tokens never allowed).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "../bench_cli.h"
#include "base/timer.h"
#include "gguf/gguf_file.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace mtp;
using namespace mtp::grammar;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "location":{"type":"string","description":"City and country"},
  "unit":{"type":"string","enum":["celsius","fahrenheit"]},
  "days":{"type":"integer"},
  "start":{"type":"string","format":"date"},
  "include":{"type":"array","items":{"type":"string","enum":["wind","rain","uv","humidity"]},"maxItems":4},
  "notes":{"type":"string"}},
  "required":["location","unit","days"],"additionalProperties":false})";

const char* kDocument =
    "{\"location\": \"Reykjav\xC3\xADk, Iceland\", \"unit\": \"celsius\", \"days\": 14, \"start\": "
    "\"2026-12-05\", "
    "\"include\": [\"wind\", \"rain\", \"humidity\"], \"notes\": \"Plan for a drive around the Golden "
    "Circle; "
    "flag any day with gusts above 20 m/s, and say \\\"ok\\\" otherwise.\"}";

std::vector<std::string> synthetic_vocab(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> vocab;
  std::unordered_map<std::string, int> seen;
  auto add = [&](std::string t) {
    if (!t.empty() && seen.emplace(t, 0).second) vocab.push_back(std::move(t));
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const std::string punct = "\"{}[],:.;!?()-_/'\\";
  std::geometric_distribution<int> letter(0.15);
  while (vocab.size() < n) {
    const int kind = static_cast<int>(rng() % 20);
    std::string t;
    if (kind < 12) {  // a word, with a leading space two times in three
      if (rng() % 3) t += ' ';
      const size_t len = 2 + rng() % 9;
      for (size_t i = 0; i < len; ++i) t += letters[std::min<size_t>(letter(rng), letters.size() - 1)];
      if (kind == 0) t[t[0] == ' ' ? 1 : 0] = static_cast<char>(std::toupper(t[t[0] == ' ' ? 1 : 0]));
    } else if (kind < 14) {
      for (size_t i = 0, len = 1 + rng() % 3; i < len; ++i) t += static_cast<char>('0' + rng() % 10);
    } else if (kind < 17) {
      for (size_t i = 0, len = 2 + rng() % 3; i < len; ++i) t += punct[rng() % punct.size()];
    } else if (kind < 18) {
      t = std::string(1 + rng() % 16, ' ');
      if (rng() % 2) t = "\n" + t;
    } else {  // one or two CJK characters (3 bytes each)
      for (size_t i = 0, len = 1 + rng() % 2; i < len; ++i) {
        const uint32_t cp = 0x4E00 + static_cast<uint32_t>(rng() % 0x5000);
        t += static_cast<char>(0xE0 | (cp >> 12));
        t += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        t += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    add(t);
  }
  return vocab;
}

Expected<std::vector<std::string>> model_vocab(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  MTP_ASSIGN_OR_RETURN(Vocab vocab, vocab_from_gguf(file.metadata()));
  MTP_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(std::move(vocab)));
  std::vector<std::string> out(static_cast<size_t>(tok.n_tokens()));
  for (int32_t id = 0; id < tok.n_tokens(); ++id)
    if (tok.token_type(id) == TokenType::kNormal || tok.token_type(id) == TokenType::kByte)
      out[id] = tok.piece(id);
  return out;
}

// Greedy longest-match cut of `text` into token ids.
std::vector<int32_t> cut(const std::string& text, const std::vector<std::string>& vocab) {
  std::unordered_map<std::string, int32_t> ids;
  size_t longest = 0;
  for (size_t id = 0; id < vocab.size(); ++id)
    if (!vocab[id].empty()) {
      ids.emplace(vocab[id], static_cast<int32_t>(id));
      longest = std::max(longest, vocab[id].size());
    }
  std::vector<int32_t> out;
  for (size_t at = 0; at < text.size();) {
    for (size_t len = std::min(longest, text.size() - at); len > 0; --len)
      if (auto it = ids.find(text.substr(at, len)); it != ids.end()) {
        out.push_back(it->second);
        at += len;
        break;
      } else if (len == 1) {
        std::fprintf(stderr, "mask_bench: byte %d at %zu is no token\n", text[at] & 0xFF, at);
        std::exit(1);
      }
  }
  return out;
}

// This thread's CPU time in ms: on a shared machine, what a step costs apart from waiting for a core.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Token-mask time per step for a tool's JSON Schema at a large vocabulary", "mask_bench"};
  size_t vocab_size = 248320;
  std::string model;
  int runs = 3;
  unsigned seed = 1;
  app.add_option("--vocab", vocab_size, "synthetic vocabulary size")->check(CLI::Range(256, 1 << 22));
  app.add_option("--model", model, "use this GGUF file's vocabulary instead");
  app.add_option("--runs", runs, "runs over the document (the first from a fresh matcher)")
      ->check(CLI::Range(1, 100));
  app.add_option("--seed", seed, "synthetic vocabulary seed");
  bool no_cache = false;
  app.add_flag("--no-cache", no_cache, "walk the trie at every step (no TokenMaskCache)");
  bench::parse_or_exit(app, argc, argv);

  std::vector<std::string> vocab;
  if (model.empty()) {
    vocab = synthetic_vocab(vocab_size, seed);
  } else {
    auto v = model_vocab(model);
    if (!v) {
      std::fprintf(stderr, "mask_bench: %s: %s\n", model.c_str(), v.status().message().c_str());
      return 1;
    }
    vocab = std::move(*v);
  }
  auto gbnf = json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema));
  auto grammar = parse_gbnf(*gbnf);
  auto matcher = Matcher::create(std::make_shared<const Grammar>(std::move(*grammar)));
  Timer build;
  const TokenTrie trie(vocab);
  const double build_ms = build.millis();
  const std::vector<int32_t> tokens = cut(kDocument, vocab);
  std::printf("vocabulary %zu tokens (%s), trie %zu nodes built in %.0f ms; document %zu bytes, %zu tokens\n",
              vocab.size(), model.empty() ? "synthetic" : model.c_str(), trie.node_count(), build_ms,
              std::string(kDocument).size(), tokens.size());
  std::vector<uint8_t> mask;
  for (int run = 1; run <= runs; ++run) {
    std::vector<double> ms;
    double cpu_ms = 0;
    size_t allowed_sum = 0;
    Matcher::StateId s = matcher->start();
    TokenMaskCache cache;
    for (int32_t id : tokens) {
      Timer t;
      const double cpu0 = thread_cpu_ms();
      if (Status st = fill_token_mask(*matcher, s, trie, mask, no_cache ? nullptr : &cache); !st.ok()) {
        std::fprintf(stderr, "mask_bench: %s\n", st.message().c_str());
        return 1;
      }
      ms.push_back(t.millis());
      cpu_ms += thread_cpu_ms() - cpu0;
      allowed_sum += static_cast<size_t>(std::count(mask.begin(), mask.end(), 1));
      if (!mask[static_cast<size_t>(id)]) {
        std::fprintf(stderr, "mask_bench: the document's token %d is masked out (a bug)\n", id);
        return 1;
      }
      s = *matcher->advance(s, vocab[static_cast<size_t>(id)]);
    }
    double sum = 0;
    for (double v : ms) sum += v;
    std::printf(
        "run %d (%s): mask per step mean %.2f ms (CPU %.2f ms), p50 %.2f, p90 %.2f, max %.2f; %zu tokens "
        "allowed on average; %zu matcher states; %zu masks from the cache (%zu kept); complete at the end: "
        "%s\n",
        run, run == 1 ? "fresh matcher" : "warm", sum / static_cast<double>(ms.size()),
        cpu_ms / static_cast<double>(ms.size()), percentile(ms, 0.5), percentile(ms, 0.9),
        *std::max_element(ms.begin(), ms.end()), allowed_sum / ms.size(), matcher->state_count(),
        cache.hits(), cache.size(), matcher->is_complete(s) ? "yes" : "no");
  }
  return 0;
}
