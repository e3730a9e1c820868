// libFuzzer target for the tokenizer built from GGUF metadata: the input is a GGUF file (tensors optional);
// its `tokenizer.ggml.*` keys must give a Tokenizer or a Status, and a tokenizer that builds must encode and
// decode any text without crashing, with every id it produces in range. The text is the seed's `fuzz.text`
// string when the file has one (so the fuzzer mutates it too), plus a fixed line with chat markers.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

void round_trip(const mtp::Tokenizer& tok, const std::string& text, bool parse_special) {
  mtp::EncodeOptions options;
  options.parse_special = parse_special;
  const std::vector<int32_t> ids = tok.encode(text, options);
  for (int32_t id : ids) {
    if (!tok.valid_id(id)) std::abort();
  }
  const std::string plain = tok.decode(ids, {.skip_control = true});
  mtp::StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  // Streaming only regroups bytes: the same ids must give the same text as a one-shot decode.
  if (streamed != tok.decode(ids)) std::abort();
  if (plain.size() > streamed.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = mtp::GgufFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) return 0;
  const mtp::Metadata& md = file->metadata();
  (void)mtp::tokenizer_fingerprint(md);
  auto vocab = mtp::vocab_from_gguf(md);
  if (!vocab.ok()) return 0;
  auto tok = mtp::Tokenizer::create(std::move(vocab).value());
  if (!tok.ok()) return 0;

  std::string text = "<|im_start|>user\nHello, world! 123 \xC3\xA9t\xC3\xA9\n<think>\xF0\x9F\x98\x80</think>";
  round_trip(*tok, text, true);
  if (auto custom = md.get_string("fuzz.text"); custom.ok()) {
    round_trip(*tok, *custom, true);
    round_trip(*tok, *custom, false);
    (void)tok->pre_tokenize(*custom);
  }
  return 0;
}
