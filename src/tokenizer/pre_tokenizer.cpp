#include "pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/check.h"
#include "tokenizer/byte_level.h"

namespace mtp::tokenizer_detail {
namespace {

// Sources (checked against llama.cpp src/llama-vocab.cpp, which quotes the tokenizer.json originals in
// comments next to its own rewrites, and against the Qwen2 / Qwen3.5 tokenizer.json pre_tokenizer Split
// patterns):
//  - qwen2  = LLAMA_VOCAB_PRE_TYPE_QWEN2: contractions, a letter run with one optional leading
//  non-letter/non-digit
//    (not CR/LF), single digits, punctuation runs with an optional leading space and trailing newlines,
//    newline runs with leading whitespace, whitespace not followed by non-whitespace, other whitespace.
//  - qwen35 = LLAMA_VOCAB_PRE_TYPE_QWEN35: the same with combining marks (\p{M}) kept with letters and out of
//    punctuation runs.
//  - gpt2 / default = the GPT-2 pattern HF's ByteLevel pre-tokenizer uses (use_regex = true).
// llama.cpp rewrites (?i:'s|...) as '[sS]|...; we keep (?i:) because HF (Oniguruma) and PCRE2 both fold case
// Unicode-wise there, so "'ſ" (U+017F, folds to s) is a contraction in HF, and it is here too.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

const char* hf_pattern_for_pre(std::string_view pre) {
  if (pre == "qwen2") return kQwen2;
  if (pre == "qwen35") return kQwen35;
  if (pre == "gpt2" || pre == "default" || pre.empty()) return kGpt2;
  return nullptr;
}

std::string hf_pattern_to_pcre2(std::string_view p) {
  // Unicode White_Space, spelled out: it is what Oniguruma's (and Python regex's) \s means. PCRE2's UCP \s
  // differs: it lacks U+0085 and (10.42) includes U+180E, which left White_Space in Unicode 6.3.
  constexpr std::string_view kWhiteSpace =
      R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029})"
      R"(\x{202F}\x{205F}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : str_cat("[", kWhiteSpace, "]");
      } else if (e == 'S') {
        MTP_CHECK(!in_class, "\\S inside a character class is not rewritten");
        out += str_cat("[^", kWhiteSpace, "]");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Expected<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  const char* hf = hf_pattern_for_pre(pre);
  if (hf == nullptr)
    return unsupported("unknown pre-tokenizer '", pre, "' (known: qwen2, qwen35, gpt2, default)");
  const std::string pattern = hf_pattern_to_pcre2(hf);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  auto impl = std::make_unique<Impl>();
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (impl->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return Status(StatusCode::kInternal, str_cat("PCRE2 rejected the '", pre, "' pattern at ", err_off, ": ",
                                                 reinterpret_cast<const char*>(msg)));
  }
  // JIT is a speed-up only: pcre2_match falls back to the interpreter when it is unavailable.
  pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE);
  return PreTokenizer(std::move(impl));
}

namespace {

// Frees the per-call PCRE2 state; per call (not per tokenizer) so that concurrent encodes share nothing
// mutable.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

// Splits a valid UTF-8 run: matches and the gaps between them, each a piece.
void split_valid(const pcre2_code* code, MatchState& st, std::string_view text, size_t base,
                 std::vector<Span>* out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // NO_UTF_CHECK: the caller hands over only well-formed UTF-8. Lookarounds still see the whole run.
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.data,
                       st.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MTP_CHECK(rc > 0, "pcre2_match failed with code ", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t begin = ov[0], end = ov[1];
    if (end == begin)
      end = begin + utf8_char_len(text, begin);  // cannot happen with our patterns; never loop
    if (begin > pos) out->push_back({base + pos, begin - pos});
    out->push_back({base + begin, end - begin});
    pos = end;
  }
  if (pos < text.size()) out->push_back({base + pos, text.size() - pos});
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<Span>* out) const {
  if (text.empty()) return;
  MatchState st;
  st.data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  st.context = pcre2_match_context_create(nullptr);
  // The default 32 KiB JIT stack can run out on long runs of one class; 1 MiB is ample, and on overflow
  // split_valid retries without JIT.
  st.stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  MTP_CHECK(st.data && st.context && st.stack, "PCRE2 allocation failed");
  pcre2_jit_stack_assign(st.context, nullptr, st.stack);

  size_t i = 0;
  while (i < text.size()) {
    // A maximal valid run, then a maximal invalid run.
    size_t j = i;
    while (j < text.size()) {
      const size_t len = utf8_char_len(text, j);
      if (len == 0) break;
      j += len;
    }
    if (j > i) split_valid(impl_->code, st, text.substr(i, j - i), i, out);
    size_t k = j;
    while (k < text.size() && utf8_char_len(text, k) == 0) ++k;
    if (k > j) out->push_back({j, k - j});
    i = k;
  }
}

}  // namespace mtp::tokenizer_detail
