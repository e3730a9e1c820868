// `mtp tokenize -m MODEL -p TEXT`: the token ids of TEXT under the model's own tokenizer, for comparing the
// tokenizer with other implementations. Only the GGUF metadata is read; weights are not bound.
#include <cstdio>
#include <memory>

#include "command.h"
#include "gguf/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace mtp::tools {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 (shortest form, no surrogates, <= U+10FFFF).
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80                   ? 1
             : (c >= 0xC2 && c <= 0xDF) ? 2
             : (c >= 0xE0 && c <= 0xEF) ? 3
             : (c >= 0xF0 && c <= 0xF4) ? 4
                                        : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (n == 3 && ((c == 0xE0 && b(i + 1) < 0xA0) || (c == 0xED && b(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || (c == 0xF4 && b(i + 1) >= 0x90))) return 0;
  return n;
}

// A piece quoted on one line: well-formed UTF-8 as is, control and stray bytes as escapes.
std::string quote_piece(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (n == 0 || c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
      ++i;
      continue;
    } else {
      out.append(s, i, n);
      i += n;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace

CommandRunner register_tokenize(CLI::App& app) {
  struct Args {
    std::string model;
    std::string prompt;
    bool detok = false;
    bool no_special = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of a text under a GGUF model's tokenizer (space-separated, one line)");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", a->prompt, "Text to tokenize")->required();
  cmd->add_flag("--detok", a->detok, "Print one line per token instead: the id, a tab, and its quoted piece");
  cmd->add_flag("--no-parse-special", a->no_special,
                "Do not match control tokens such as <|im_start|> in the text (treat them as plain text)");
  return [a] {
    auto file = GgufFile::open(a->model);
    if (!file.ok()) return report_error("tokenize", file.status());
    auto vocab = vocab_from_gguf(file->metadata());
    if (!vocab.ok()) return report_error("tokenize", vocab.status().with_context(a->model));
    auto tok = Tokenizer::create(std::move(vocab).value());
    if (!tok.ok()) return report_error("tokenize", tok.status().with_context(a->model));
    EncodeOptions opt;
    opt.parse_special = !a->no_special;
    const std::vector<int32_t> ids = tok->encode(a->prompt, opt);
    if (a->detok) {
      for (int32_t id : ids) std::printf("%d\t%s\n", id, quote_piece(tok->piece(id)).c_str());
    } else {
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
      std::printf("%s\n", line.c_str());
    }
    return kExitOk;
  };
}

}  // namespace mtp::tools
