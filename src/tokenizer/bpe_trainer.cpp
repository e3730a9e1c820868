#include "tokenizer/bpe_trainer.h"

#include <map>
#include <unordered_map>

#include "base/check.h"
#include "pre_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace mtp {

Vocab train_bpe(std::string_view corpus, int n_merges, const BpeTrainOptions& options) {
  auto pre = tokenizer_detail::PreTokenizer::create(options.pre);
  MTP_CHECK(pre.ok(), pre.status().message());

  // Distinct pre-tokens with their counts. An ordered map makes every later iteration order (and so the
  // result) independent of hashing.
  std::map<std::string, int64_t> counts;
  std::vector<tokenizer_detail::Span> spans;
  pre->split(corpus, &spans);
  for (const auto& s : spans) ++counts[std::string(corpus.substr(s.begin, s.size))];

  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> syms;
    for (char ch : w) syms.push_back(static_cast<uint8_t>(ch));
    words.push_back(std::move(syms));
    freq.push_back(c);
  }

  std::vector<std::string> token_bytes(256);
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    token_bytes[b] = std::string(1, static_cast<char>(b));
    id_of[token_bytes[b]] = b;
  }

  Vocab v;
  v.pre = options.pre;
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (size_t w = 0; w < words.size(); ++w) {
      const auto& syms = words[w];
      for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += freq[w];
    }
    const std::pair<int32_t, int32_t>* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [p, c] : pairs) {
      const bool better =
          c > best_count ||
          (c == best_count && std::tie(token_bytes[p.first], token_bytes[p.second]) <
                                  std::tie(token_bytes[best->first], token_bytes[best->second]));
      if (better) {
        best = &p;
        best_count = c;
      }
    }
    if (best == nullptr || best_count < options.min_frequency) break;
    const auto [l, r] = *best;
    const std::string joined = token_bytes[l] + token_bytes[r];
    // Two different pairs can spell the same string; the second merge then reuses the token (HF allows it).
    auto [it, is_new] = id_of.emplace(joined, static_cast<int32_t>(token_bytes.size()));
    if (is_new) token_bytes.push_back(joined);
    const int32_t id = it->second;
    v.merges.push_back(bytes_to_byte_level(token_bytes[l]) + " " + bytes_to_byte_level(token_bytes[r]));
    for (auto& syms : words) {  // left to right, non-overlapping
      size_t o = 0;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == l && syms[i + 1] == r) {
          syms[o++] = id;
          ++i;
        } else {
          syms[o++] = syms[i];
        }
      }
      syms.resize(o);
    }
  }

  for (const std::string& t : token_bytes) v.tokens.push_back(bytes_to_byte_level(t));
  v.token_types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  const auto add = [&](const std::string& text, TokenType type) {
    v.tokens.push_back(text);
    v.token_types.push_back(static_cast<int32_t>(type));
  };
  for (const auto& t : options.control_tokens) add(t, TokenType::kControl);
  for (const auto& t : options.user_defined_tokens) add(t, TokenType::kUserDefined);

  const auto role = [&](const std::string& text) -> std::optional<int32_t> {
    if (text.empty()) return std::nullopt;
    for (size_t i = 0; i < options.control_tokens.size(); ++i) {
      if (options.control_tokens[i] == text) return static_cast<int32_t>(token_bytes.size() + i);
    }
    MTP_CHECK(false, "special role '", text, "' is not one of the control tokens");
    return std::nullopt;
  };
  v.bos_id = role(options.bos);
  v.eos_id = role(options.eos);
  v.pad_id = role(options.pad);
  return v;
}

}  // namespace mtp
