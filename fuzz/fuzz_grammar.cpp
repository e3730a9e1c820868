// libFuzzer target for structured output: the input is GBNF text (and, when it parses as JSON, a JSON Schema
// compiled to GBNF). A grammar that parses must drive the matcher and the token mask over a small vocabulary
// made of the input's own bytes without a crash or a hang: every step either moves on, is refused, or stops
// at the matcher's limits with a Status.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

namespace {

void drive(std::string_view gbnf, std::string_view input) {
  auto g = mtp::grammar::parse_gbnf(gbnf);
  if (!g.ok()) return;
  // Small limits keep every input fast; the limits themselves are what is under test.
  auto m = mtp::grammar::Matcher::create(std::make_shared<const mtp::grammar::Grammar>(std::move(*g)),
                                         {.max_stacks = 256, .max_expand_steps = 4096, .max_states = 2048});
  if (!m.ok()) return;
  std::vector<std::string> vocab;
  for (size_t i = 0; i + 1 < input.size() && vocab.size() < 64; i += 2)
    vocab.emplace_back(input.substr(i, 1 + i % 3));
  vocab.emplace_back("");
  const mtp::grammar::TokenTrie trie(vocab);
  std::vector<uint8_t> mask;
  mtp::grammar::Matcher::StateId s = m->start();
  for (int step = 0; step < 16 && s != mtp::grammar::Matcher::kReject; ++step) {
    if (!mtp::grammar::fill_token_mask(*m, s, trie, mask).ok()) return;
    size_t pick = vocab.size();
    for (size_t id = 0; id < mask.size(); ++id)
      if (mask[id]) pick = id;
    if (pick == vocab.size()) return;
    auto next = m->advance(s, vocab[pick]);
    if (!next.ok()) return;
    s = *next;
    (void)m->is_complete(s);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  drive(text, text);
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!schema.is_discarded()) {
    auto gbnf = mtp::grammar::json_schema_to_gbnf(schema);
    if (gbnf.ok()) drive(*gbnf, text);
  }
  return 0;
}
