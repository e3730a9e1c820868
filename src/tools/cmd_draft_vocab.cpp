// `mtp draft-vocab`: build and inspect the token-id subset files of the vocabulary-subset draft head (issue
// 10; the file format is documented in src/speculative/draft_vocab.cpp).
//
//   mtp draft-vocab build CORPUS... -m MODEL -o ids.bin --size N [--from-ids FILE]...
//     Tokenizes the corpus text files with the model's tokenizer (only its GGUF metadata is read), counts
//     every id, and writes N ids: the control tokens chat needs (speculative::always_draft_ids) first, then
//     the ids seen, by count (ties: lower id first), then unseen ids by increasing id (unused padding tokens
//     last).
//     --from-ids adds ids recorded elsewhere (e.g. the tokens a server produced): whitespace-separated
//     decimal ids, '#' starts a comment to the end of the line (`mtp tokenize` output is accepted as is).
//   mtp draft-vocab show ids.bin [-m MODEL] [--ids]
//     Validates the file and prints a summary; with -m, checks it against the model's vocabulary and lists
//     the control tokens it lacks; --ids prints every id, one per line, in rank order.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>

#include "base/mapped_file.h"
#include "command.h"
#include "gguf/gguf_file.h"
#include "speculative/draft_vocab.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace mtp::tools {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 18;  // corpus text is tokenized in pieces of about 256 KiB

// The model's tokenizer and vocabulary size (token list length, checked against token_embd's rows).
struct ModelVocab {
  std::optional<Tokenizer> tok;
  int64_t n_vocab = 0;
};

Expected<ModelVocab> load_vocab(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  auto vocab = vocab_from_gguf(file.metadata());
  if (!vocab.ok()) return vocab.status().with_context(path);
  if (vocab->tokens.empty()) return unsupported(path, ": the file has no tokenizer (tokenizer.ggml.tokens)");
  ModelVocab mv;
  mv.n_vocab = static_cast<int64_t>(vocab->tokens.size());
  if (const TensorInfo* e = file.find_tensor("token_embd.weight"); e != nullptr && e->ne[1] != mv.n_vocab) {
    return corrupt(path, ": the token list has ", mv.n_vocab, " tokens but token_embd.weight has ", e->ne[1],
                   " rows");
  }
  auto tok = Tokenizer::create(std::move(vocab).value());
  if (!tok.ok()) return tok.status().with_context(path);
  mv.tok.emplace(std::move(tok).value());
  return mv;
}

// Splits text into pieces of about kChunkBytes that end after a newline (and after any newlines that follow
// it), so that a chunk boundary splits no line and no run of blank lines.
std::vector<std::string_view> chunks(std::string_view text) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = std::min(text.size(), begin + kChunkBytes);
    if (end < text.size()) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
      while (end < text.size() && text[end] == '\n') ++end;
    }
    out.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

// Counts the ids of every corpus file into `counts`; returns the number of tokens.
Expected<uint64_t> count_corpus(const std::vector<std::string>& paths, const Tokenizer& tok,
                                bool parse_special, std::vector<uint64_t>& counts, ThreadPool& pool) {
  EncodeOptions opt;
  opt.parse_special = parse_special;
  opt.add_bos = false;
  opt.add_eos = false;
  std::vector<std::vector<uint64_t>> local(static_cast<size_t>(pool.size()));
  uint64_t total = 0;
  for (const std::string& path : paths) {
    MTP_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
    const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
    const std::vector<std::string_view> parts = chunks(text);
    std::atomic<uint64_t> n_tokens{0};
    pool.parallel_for(parts.size(), [&](size_t i, int thread) {
      std::vector<uint64_t>& c = local[static_cast<size_t>(thread)];
      if (c.empty()) c.assign(counts.size(), 0);
      const std::vector<int32_t> ids = tok.encode(parts[i], opt);
      for (int32_t id : ids) ++c[static_cast<size_t>(id)];
      n_tokens += ids.size();
    });
    total += n_tokens.load();
  }
  for (const auto& c : local)
    for (size_t i = 0; i < c.size(); ++i) counts[i] += c[i];
  return total;
}

// Reads a --from-ids file: whitespace-separated decimal ids, '#' comments. Returns the number of ids.
Expected<uint64_t> count_id_file(const std::string& path, int64_t n_vocab, std::vector<uint64_t>& counts) {
  MTP_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  uint64_t n = 0, line = 1;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      size_t end = i;
      while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) && text[end] != '#')
        ++end;
      const std::string_view word = text.substr(i, end - i);
      int64_t v = 0;
      bool ok = word.size() <= 10;
      for (char d : word) {
        ok = ok && d >= '0' && d <= '9';
        v = v * 10 + (d - '0');
      }
      if (!ok) {
        return corrupt(path, ":", line, ": '", std::string(word.substr(0, 40)),
                       "' is not a token id (expected decimal ids separated by whitespace)");
      }
      if (v >= n_vocab)
        return corrupt(path, ":", line, ": id ", v, " is out of range (vocabulary of ", n_vocab, " tokens)");
      ++counts[static_cast<size_t>(v)];
      ++n;
      i = end;
    }
  }
  return n;
}

std::string percent(double num, double den) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", den > 0 ? 100.0 * num / den : 0.0);
  return buf;
}

struct BuildArgs {
  std::vector<std::string> corpus;
  std::vector<std::string> from_ids;
  std::string model;
  std::string out;
  int64_t size = 0;
  bool no_special = false;
  int threads = 0;
};

Status build(const BuildArgs& a) {
  if (a.corpus.empty() && a.from_ids.empty())
    return invalid_argument("nothing to count: give corpus text files and/or --from-ids FILE");
  MTP_ASSIGN_OR_RETURN(ModelVocab mv, load_vocab(a.model));
  // Before the corpus is read (minutes for a large one), not after.
  if (a.size < 1) return invalid_argument("subset size must be at least 1 (got ", a.size, ")");
  if (a.size > mv.n_vocab)
    return invalid_argument("subset size ", a.size, " exceeds the vocabulary (", mv.n_vocab, " tokens)");
  const Tokenizer& tok = *mv.tok;
  std::vector<uint64_t> counts(static_cast<size_t>(mv.n_vocab), 0);
  ThreadPool pool(a.threads);
  MTP_ASSIGN_OR_RETURN(uint64_t corpus_tokens, count_corpus(a.corpus, tok, !a.no_special, counts, pool));
  uint64_t recorded = 0;
  for (const std::string& path : a.from_ids) {
    MTP_ASSIGN_OR_RETURN(uint64_t n, count_id_file(path, mv.n_vocab, counts));
    recorded += n;
  }
  const std::vector<int32_t> always = speculative::always_draft_ids(tok.vocab());
  MTP_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                       speculative::rank_draft_ids(counts, tok.vocab(), a.size, always));
  MTP_RETURN_IF_ERROR(speculative::write_draft_vocab_file(a.out, ids, mv.n_vocab));

  const uint64_t total = corpus_tokens + recorded;
  // The subset's ids in three disjoint groups that add up: control tokens (always kept), other ids the
  // counts saw, the rest.
  uint64_t distinct = 0, covered = 0, seen_in = 0;
  for (uint64_t c : counts) distinct += c > 0;
  const std::set<int32_t> control(always.begin(), always.end());
  for (int32_t id : ids) {
    covered += counts[static_cast<size_t>(id)];
    seen_in += counts[static_cast<size_t>(id)] > 0 && control.count(id) == 0;
  }
  std::printf(
      "counted        %llu tokens (%llu from %zu corpus files, %llu from %zu id files), %llu distinct ids\n",
      (unsigned long long)total, (unsigned long long)corpus_tokens, a.corpus.size(),
      (unsigned long long)recorded, a.from_ids.size(), (unsigned long long)distinct);
  std::printf("wrote          %s: %zu of %lld ids (%zu control tokens, %llu seen, %llu unseen)\n",
              a.out.c_str(), ids.size(), (long long)mv.n_vocab, always.size(), (unsigned long long)seen_in,
              (unsigned long long)(ids.size() - always.size() - seen_in));
  std::printf("coverage       %s of the counted tokens are in the subset\n",
              percent(static_cast<double>(covered), static_cast<double>(total)).c_str());
  return Status::Ok();
}

struct ShowArgs {
  std::string file;
  std::string model;
  bool ids = false;
};

Status show(const ShowArgs& a) {
  MTP_ASSIGN_OR_RETURN(speculative::DraftVocabFile f, speculative::read_draft_vocab_file(a.file));
  std::optional<ModelVocab> mv;
  if (!a.model.empty()) {
    MTP_ASSIGN_OR_RETURN(ModelVocab loaded, load_vocab(a.model));
    if (loaded.n_vocab != f.n_vocab) {
      return unsupported(a.file, ": built for a vocabulary of ", f.n_vocab, " tokens, ", a.model, " has ",
                         loaded.n_vocab);
    }
    mv = std::move(loaded);
  }
  if (a.ids) {
    for (int32_t id : f.ids) std::printf("%d\n", id);
    return Status::Ok();
  }
  const int64_t n = static_cast<int64_t>(f.ids.size());
  const auto [lo, hi] = std::minmax_element(f.ids.begin(), f.ids.end());
  int64_t below = 0;
  for (int32_t id : f.ids) below += id < n;
  std::printf("file           %s\n", a.file.c_str());
  std::printf("format         draft-vocab v%u, %lld bytes\n", f.version, (long long)(20 + 4 * n));
  std::printf("vocabulary     %lld tokens\n", (long long)f.n_vocab);
  std::printf("ids            %lld (%s of the vocabulary)\n", (long long)n,
              percent(static_cast<double>(n), static_cast<double>(f.n_vocab)).c_str());
  std::printf("id range       %d .. %d\n", *lo, *hi);
  std::printf("first-N        %lld of the ids are below %lld (the first-N subset of the same size)\n",
              (long long)below, (long long)n);
  if (!mv) return Status::Ok();
  const Tokenizer& tok = *mv->tok;
  std::vector<int32_t> sorted = f.ids;
  std::sort(sorted.begin(), sorted.end());
  const std::vector<int32_t> always = speculative::always_draft_ids(tok.vocab());
  std::string missing;
  int64_t present = 0;
  for (int32_t id : always) {
    if (std::binary_search(sorted.begin(), sorted.end(), id)) {
      ++present;
    } else {
      missing += (missing.empty() ? "" : " ") + tok.piece(id);
    }
  }
  std::printf("model          %s (vocabulary matches)\n", a.model.c_str());
  std::printf("control tokens %lld of %zu always-included tokens in the file%s%s\n", (long long)present,
              always.size(), missing.empty() ? "" : "; the engine adds the others: ", missing.c_str());
  std::string top;
  for (int64_t i = 0; i < std::min<int64_t>(n, 12); ++i) {
    std::string piece = tok.piece(f.ids[static_cast<size_t>(i)]);
    std::string shown;
    for (char c : piece) {
      if (c == '\n')
        shown += "\\n";
      else if (c == '\t')
        shown += "\\t";
      else if (static_cast<unsigned char>(c) < 0x20)
        shown += '?';
      else
        shown += c;
    }
    top += (i ? " | " : "") + shown;
  }
  std::printf("top ids        %s\n", top.c_str());
  return Status::Ok();
}

}  // namespace

CommandRunner register_draft_vocab(CLI::App& app) {
  auto b = std::make_shared<BuildArgs>();
  auto s = std::make_shared<ShowArgs>();
  CLI::App* cmd = app.add_subcommand(
      "draft-vocab",
      "Build or inspect a token-id subset for the vocabulary-subset draft head (--draft-vocab)");
  cmd->require_subcommand(1);
  CLI::App* bc = cmd->add_subcommand(
      "build", "Rank token ids by their frequency in text corpora and/or recorded ids; write the top N");
  bc->add_option("corpus", b->corpus, "Text files to tokenize with the model's tokenizer");
  bc->add_option("-m,--model", b->model, "GGUF model whose tokenizer to use (only its metadata is read)")
      ->required();
  bc->add_option("-o,--output", b->out, "Subset file to write")->required();
  bc->add_option("--size", b->size, "Number of ids in the subset (control tokens included)")->required();
  bc->add_option(
        "--from-ids", b->from_ids,
        "File of recorded token ids to count too (decimal ids separated by whitespace, '#' comments); "
        "repeatable")
      ->allow_extra_args(false);
  bc->add_flag("--no-parse-special", b->no_special,
               "Tokenize control tokens such as <|im_end|> in the corpus as plain text");
  bc->add_option("-t,--threads", b->threads, "Threads for tokenizing (default: all cores)");
  CLI::App* sc = cmd->add_subcommand("show", "Validate a subset file and print a summary");
  sc->add_option("file", s->file, "Subset file")->required();
  sc->add_option("-m,--model", s->model, "Check the file against this model's vocabulary");
  sc->add_flag("--ids", s->ids, "Print every id in rank order, one per line (the --from-ids format)");
  return [b, s, bc, sc] {
    if (bc->parsed()) {
      Status st = build(*b);
      return st.ok() ? kExitOk : report_error("draft-vocab build", st);
    }
    if (sc->parsed()) {
      Status st = show(*s);
      return st.ok() ? kExitOk : report_error("draft-vocab show", st);
    }
    return kExitUsageError;
  };
}

}  // namespace mtp::tools
