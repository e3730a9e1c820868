#include "tokenizer/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "base/check.h"
#include "pre_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace mtp {
namespace {

using tokenizer_detail::PreTokenizer;
using tokenizer_detail::Span;

// Open-addressing map (left id, right id) -> (rank, merged id). The merge lookup is the hot path of encode
// and the table has ~250K entries for Qwen; std::unordered_map's node per entry costs both load time and
// cache misses.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t id;
  };

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, {0, 0});
    mask_ = cap - 1;
  }
  // Later insertions of the same pair overwrite earlier ones, as in HF's BPE builder (a HashMap insert).
  void put(int32_t left, int32_t right, Value v) {
    const uint64_t key = make_key(left, right);
    size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;
    values_[i] = v;
  }
  const Value* find(int32_t left, int32_t right) const {
    const uint64_t key = make_key(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative, so no key is all ones
  static uint64_t make_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static size_t hash(uint64_t k) {  // splitmix64 finalizer
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    return static_cast<size_t>(k ^ (k >> 31));
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
};

// NFC of `text` into `out`, and whether it differs. ASCII is its own NFC (the common case costs one scan);
// text that is not well-formed UTF-8 is left as it is (the tokenizer takes any bytes; Hugging Face's, which
// only ever sees well-formed text, has nothing to match there).
bool nfc_differs(std::string_view text, std::string& out) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return false;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return false;  // mapped is not allocated on error
  out.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return out != text;
}

bool is_added_type(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  std::vector<TokenType> types;
  std::vector<std::string> pieces;                        // decoded bytes per id
  std::unordered_map<std::string_view, int32_t> by_text;  // views into vocab.tokens (Impl never moves)
  PairMap merges;
  std::array<int32_t, 256> byte_token{};
  // Added tokens that can be cut out of the text, grouped by first byte, longest first (then lowest id).
  std::array<std::vector<int32_t>, 256> added_by_first_byte;
  std::optional<PreTokenizer> pre;
  bool nfc = false;  // the vocabulary's tokenizer normalizes text to NFC (Qwen's tokenizer.json declares it)

  Status build();
  void encode_segment(std::string_view text, std::vector<Span>& spans, std::vector<int32_t>* out) const;
  void bpe(std::string_view word, std::vector<int32_t>* out) const;
};

Status Tokenizer::Impl::build() {
  if (vocab.model != "gpt2")
    return unsupported("tokenizer model '", vocab.model, "' is not supported (only gpt2)");
  MTP_ASSIGN_OR_RETURN(PreTokenizer p, PreTokenizer::create(vocab.pre));
  pre.emplace(std::move(p));
  nfc = vocab.pre == "qwen2" || vocab.pre == "qwen35";

  const size_t n = vocab.tokens.size();
  if (n == 0) return corrupt("vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) return corrupt("vocabulary has too many tokens: ", n);
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    return corrupt("token_type has ", vocab.token_types.size(), " entries for ", n, " tokens");
  }
  types.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < vocab.token_types.size(); ++i) {
    const int32_t t = vocab.token_types[i];
    if (t < 0 || t > 6) return corrupt("token ", i, " has unknown token type ", t);
    types[i] = t == 0 ? TokenType::kNormal : static_cast<TokenType>(t);
  }
  const auto check_role = [&](const char* what, const std::optional<int32_t>& id) -> Status {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      return corrupt(what, " id ", *id, " is out of range (", n, " tokens)");
    }
    return Status::Ok();
  };
  MTP_RETURN_IF_ERROR(check_role("bos", vocab.bos_id));
  MTP_RETURN_IF_ERROR(check_role("eos", vocab.eos_id));
  MTP_RETURN_IF_ERROR(check_role("pad", vocab.pad_id));
  if (vocab.add_bos && !vocab.bos_id) return corrupt("add_bos is set but there is no bos id");
  if (vocab.add_eos && !vocab.eos_id) return corrupt("add_eos is set but there is no eos id");

  by_text.reserve(n);
  pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = vocab.tokens[i];
    const auto id = static_cast<int32_t>(i);
    if (t.empty()) return corrupt("token ", i, " is empty");
    const auto [it, inserted] = by_text.emplace(t, id);
    if (!inserted) return corrupt("duplicate token '", t, "' at ids ", it->second, " and ", i);
    const TokenType type = types[i];
    if (type == TokenType::kNormal || type == TokenType::kByte) {
      // A byte token in SentencePiece form "<0xAB>" is that byte; otherwise undo the byte-level alphabet. A
      // character outside the alphabet (not produced by converters) is kept as it is rather than rejected.
      const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      if (type == TokenType::kByte && t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && hex(t[3]) &&
          hex(t[4])) {
        pieces[i] = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
      } else {
        auto bytes = byte_level_to_bytes(t);
        pieces[i] = bytes ? std::move(*bytes) : t;
      }
    } else {
      pieces[i] = t;  // added tokens are stored as raw text
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = by_text.find(byte_to_unicode(static_cast<uint8_t>(b)));
    if (it == by_text.end())
      return corrupt("vocabulary has no token for byte ", b, " ('", byte_to_unicode(static_cast<uint8_t>(b)),
                     "')");
    byte_token[b] = it->second;
  }

  merges.reserve(vocab.merges.size());
  std::string joined;
  for (size_t r = 0; r < vocab.merges.size(); ++r) {
    const std::string& m = vocab.merges[r];
    // Split at the first space after the first character, as llama.cpp does, so a left side " " would
    // survive.
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) return corrupt("merge ", r, " '", m, "' is not 'left right'");
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    const auto l = by_text.find(left);
    const auto rt = by_text.find(right);
    joined.assign(left).append(right);
    const auto j = by_text.find(joined);
    if (l == by_text.end() || rt == by_text.end() || j == by_text.end()) {
      const std::string_view missing = l == by_text.end() ? left : rt == by_text.end() ? right : joined;
      return corrupt("merge ", r, " '", m, "' refers to unknown token '", missing, "'");
    }
    merges.put(l->second, rt->second, {static_cast<int32_t>(r), j->second});
  }

  for (size_t i = 0; i < n; ++i) {
    if (is_added_type(types[i])) added_by_first_byte[static_cast<uint8_t>(vocab.tokens[i][0])].push_back(i);
  }
  for (auto& list : added_by_first_byte) {
    std::sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      const size_t la = vocab.tokens[a].size(), lb = vocab.tokens[b].size();
      return la != lb ? la > lb : a < b;
    });
  }
  return Status::Ok();
}

// HF tokenizers' Word::merge_all: a heap of candidate merges ordered by (rank, position); a popped candidate
// is applied only if the pair now at that position still merges into the same token. Merging changes only the
// two neighbouring pairs, so each step is O(log n).
void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    out->push_back(byte_token[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (vocab.ignore_merges) {
    const auto it = by_text.find(bytes_to_byte_level(word));
    if (it != by_text.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
  };
  // std heap is a max-heap: "less" means "later" (higher rank, or same rank further right).
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> sym(n);
  std::vector<Candidate> heap;
  heap.reserve(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_token[static_cast<uint8_t>(word[i])], i - 1, i + 1, true};
  sym[n - 1].next = -1;
  const auto consider = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const PairMap::Value* v = merges.find(sym[pos].id, sym[next].id)) {
      heap.push_back({v->rank, pos, v->id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& s = sym[c.pos];
    if (!s.alive || s.next < 0) continue;
    const PairMap::Value* v = merges.find(s.id, sym[s.next].id);
    if (v == nullptr || v->id != c.id) continue;  // stale: this pair changed since it was queued
    Symbol& right = sym[s.next];
    right.alive = false;
    s.id = c.id;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

void Tokenizer::Impl::encode_segment(std::string_view text, std::vector<Span>& spans,
                                     std::vector<int32_t>* out) const {
  std::string normalized;
  if (nfc && nfc_differs(text, normalized)) text = normalized;
  spans.clear();
  pre->split(text, &spans);
  for (const Span& s : spans) bpe(text.substr(s.begin, s.size), out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::create(Vocab vocab) {
  auto impl = std::make_unique<Impl>();
  impl->vocab = std::move(vocab);
  MTP_RETURN_IF_ERROR(impl->build().with_context("tokenizer"));
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos.value_or(im.vocab.add_bos) && im.vocab.bos_id) out.push_back(*im.vocab.bos_id);
  std::vector<Span> spans;
  // Leftmost-longest scan for added tokens (HF's AddedVocabulary uses Aho-Corasick, LeftmostLongest): at each
  // position the longest added token starting there wins; text between matches goes to BPE.
  size_t seg = 0;
  for (size_t i = 0; i < text.size();) {
    const auto& cands = im.added_by_first_byte[static_cast<uint8_t>(text[i])];
    int32_t hit = -1;
    for (int32_t id : cands) {
      if (!options.parse_special && im.types[id] != TokenType::kUserDefined) continue;
      if (text.substr(i).starts_with(im.vocab.tokens[id])) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > seg) im.encode_segment(text.substr(seg, i - seg), spans, &out);
    out.push_back(hit);
    i += im.vocab.tokens[hit].size();
    seg = i;
  }
  if (seg < text.size()) im.encode_segment(text.substr(seg), spans, &out);
  if (options.add_eos.value_or(im.vocab.add_eos) && im.vocab.eos_id) out.push_back(*im.vocab.eos_id);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  for (int32_t id : ids) {
    if (options.skip_control && token_type(id) == TokenType::kControl) continue;
    out += piece(id);
  }
  return out;
}

const std::string& Tokenizer::piece(int32_t id) const {
  MTP_CHECK(valid_id(id), "token id ", id, " out of range (", n_tokens(), " tokens)");
  return impl_->pieces[id];
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<Span> spans;
  impl_->pre->split(text, &spans);
  std::vector<std::string> out;
  out.reserve(spans.size());
  for (const Span& s : spans) out.emplace_back(text.substr(s.begin, s.size));
  return out;
}

int32_t Tokenizer::n_tokens() const {
  return static_cast<int32_t>(impl_->pieces.size());
}

TokenType Tokenizer::token_type(int32_t id) const {
  MTP_CHECK(valid_id(id), "token id ", id, " out of range (", n_tokens(), " tokens)");
  return impl_->types[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const auto it = impl_->by_text.find(text);
  if (it == impl_->by_text.end()) return std::nullopt;
  return it->second;
}

const Vocab& Tokenizer::vocab() const {
  return impl_->vocab;
}

std::string StreamDecoder::push(int32_t id) {
  if (options_.skip_control && tokenizer_->token_type(id) == TokenType::kControl) return {};
  pending_ += tokenizer_->piece(id);
  const size_t n = utf8_emittable_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace mtp
