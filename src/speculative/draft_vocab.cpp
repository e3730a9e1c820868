// Draft vocabulary subsets: the subset file, the ranking that builds one, and the gathered head.
//
// Subset file format, version 1. All integers are unsigned 32-bit little-endian; the file is exactly
// 20 + 4 * count bytes:
//
//   offset  size       field
//   0       8          magic, the ASCII bytes "MTPDVOCB"
//   8       4          version = 1 (a reader refuses any other)
//   12      4          n_vocab: the vocabulary size the ids were chosen for (1 .. 2^31 - 1); a model must
//                      have exactly this many tokens to use the file
//   16      4          count: how many ids follow (1 .. n_vocab)
//   20      4 * count  the ids in rank order (most useful first: `mtp draft-vocab build` writes the
//                      always-included control tokens, then ids by observed frequency, then unseen ids by
//                      increasing id); each < n_vocab, all distinct
//
// A reader checks every field: magic, version, n_vocab, count, the exact size (truncation and trailing
// bytes), every id's range and duplicates; each error names the file and the offending value.
#include "speculative/draft_vocab.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>

#include "base/atomic_file.h"
#include "base/check.h"
#include "base/mapped_file.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"

namespace mtp::speculative {
namespace {

constexpr std::array<uint8_t, 8> kMagic = {'M', 'T', 'P', 'D', 'V', 'O', 'C', 'B'};
constexpr size_t kHeaderBytes = 20;
constexpr int64_t kMaxVocab = std::numeric_limits<int32_t>::max();

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

void store_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// The magic as printable text, other bytes as \xNN (for the bad-magic error).
std::string printable(std::span<const uint8_t> bytes) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string s;
  for (uint8_t b : bytes) {
    if (b >= 0x20 && b < 0x7F && b != '\\' && b != '"') {
      s += static_cast<char>(b);
    } else {
      s += "\\x";
      s += kHex[b >> 4];
      s += kHex[b & 15];
    }
  }
  return s;
}

// Checks that ids are distinct and each in [0, n_vocab); `what` names them in the error ("id", "draft id").
Status check_ids(std::span<const int32_t> ids, int64_t n_vocab, std::string_view what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab)
      return corrupt(what, " ", ids[i], " at index ", i, " is out of range for a vocabulary of ", n_vocab,
                     " tokens");
  }
  // Sorting (id, index) pairs finds duplicates in O(count log count) whatever n_vocab claims.
  std::vector<std::pair<int32_t, size_t>> order(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) order[i] = {ids[i], i};
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i].first == order[i - 1].first)
      return corrupt(what, " ", order[i].first, " appears more than once (index ", order[i - 1].second,
                     " and ", order[i].second, ")");
  }
  return Status::Ok();
}

Expected<DraftVocabFile> parse_file(std::span<const uint8_t> b) {
  const size_t have_magic = std::min(b.size(), kMagic.size());
  if (!std::equal(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(have_magic), kMagic.begin())) {
    return corrupt("not a draft-vocab subset file: starts with \"", printable(b.first(have_magic)),
                   "\", expected \"MTPDVOCB\"");
  }
  if (b.size() < kHeaderBytes)
    return corrupt("truncated: ", b.size(), " bytes, the header alone needs ", kHeaderBytes);
  DraftVocabFile f;
  f.version = load_u32(b.data() + 8);
  if (f.version != kDraftVocabFileVersion)
    return unsupported("format version ", f.version, "; this build reads version ", kDraftVocabFileVersion);
  const uint32_t n_vocab = load_u32(b.data() + 12), count = load_u32(b.data() + 16);
  if (n_vocab == 0 || n_vocab > kMaxVocab)
    return corrupt("vocabulary size ", n_vocab, " in the header is out of range (1 to ", kMaxVocab, ")");
  if (count == 0) return corrupt("holds no ids (count 0)");
  if (count > n_vocab)
    return corrupt("count ", count, " exceeds the vocabulary size ", n_vocab, " (ids must be distinct)");
  const uint64_t want = kHeaderBytes + 4ull * count;
  if (b.size() < want) {
    return corrupt("truncated: the header announces ", count, " ids (", want, " bytes), the file has ",
                   b.size(), " bytes");
  }
  if (b.size() > want) {
    return corrupt(b.size() - want, " trailing bytes after the ", count, " ids (", want, " bytes expected, ",
                   b.size(), " found)");
  }
  f.n_vocab = n_vocab;
  f.ids.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t v = load_u32(b.data() + kHeaderBytes + 4ull * i);
    if (v >= n_vocab)
      return corrupt("id ", v, " at index ", i, " is out of range for a vocabulary of ", n_vocab, " tokens");
    f.ids[i] = static_cast<int32_t>(v);
  }
  MTP_RETURN_IF_ERROR(check_ids(f.ids, f.n_vocab, "id"));  // duplicates
  return f;
}

bool is_type(const Vocab& v, size_t id, TokenType t) {
  return id < v.token_types.size() && v.token_types[id] == static_cast<int32_t>(t);
}

}  // namespace

Expected<DraftVocabFile> read_draft_vocab_file(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file.ok()) return file.status();  // MappedFile's errors already name the path
  auto parsed = parse_file(file->bytes());
  if (!parsed.ok()) return parsed.status().with_context(path);
  return parsed;
}

Expected<std::vector<int32_t>> read_draft_vocab_file(const std::string& path, int64_t n_vocab) {
  MTP_ASSIGN_OR_RETURN(DraftVocabFile f, read_draft_vocab_file(path));
  if (f.n_vocab != n_vocab) {
    return unsupported(path, ": built for a vocabulary of ", f.n_vocab, " tokens, the model has ", n_vocab);
  }
  return std::move(f.ids);
}

Status write_draft_vocab_file(const std::string& path, std::span<const int32_t> ids, int64_t n_vocab) {
  if (n_vocab < 1 || n_vocab > kMaxVocab)
    return invalid_argument(path, ": vocabulary size ", n_vocab, " is out of range (1 to ", kMaxVocab, ")");
  if (ids.empty()) return invalid_argument(path, ": a subset file needs at least one id");
  if (Status s = check_ids(ids, n_vocab, "id"); !s.ok())
    return invalid_argument(path, ": not written: ", s.message());
  std::vector<uint8_t> bytes(kMagic.begin(), kMagic.end());
  bytes.reserve(kHeaderBytes + 4 * ids.size());
  store_u32(bytes, kDraftVocabFileVersion);
  store_u32(bytes, static_cast<uint32_t>(n_vocab));
  store_u32(bytes, static_cast<uint32_t>(ids.size()));
  for (int32_t id : ids) store_u32(bytes, static_cast<uint32_t>(id));
  MTP_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  MTP_RETURN_IF_ERROR(out.write(bytes));
  return out.commit();
}

std::vector<int32_t> always_draft_ids(const Vocab& vocab) {
  const int64_t n = static_cast<int64_t>(vocab.tokens.size());
  std::vector<int32_t> ids;
  if (vocab.eos_id && *vocab.eos_id >= 0 && (n == 0 || *vocab.eos_id < n)) ids.push_back(*vocab.eos_id);
  static constexpr std::string_view kNamed[] = {"<|im_end|>",   "<|endoftext|>",   "<|im_start|>",
                                                "<think>",      "</think>",        "<tool_call>",
                                                "</tool_call>", "<tool_response>", "</tool_response>"};
  std::vector<int32_t> typed;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (is_type(vocab, u, TokenType::kControl) || is_type(vocab, u, TokenType::kUserDefined)) {
      typed.push_back(static_cast<int32_t>(i));
    } else if (std::find(std::begin(kNamed), std::end(kNamed), vocab.tokens[u]) != std::end(kNamed)) {
      ids.push_back(static_cast<int32_t>(i));
    }
  }
  if (typed.size() <= 1024) {
    ids.insert(ids.end(), typed.begin(), typed.end());
  } else {
    for (int32_t id : typed) {
      const std::string& t = vocab.tokens[static_cast<size_t>(id)];
      if (std::find(std::begin(kNamed), std::end(kNamed), t) != std::end(kNamed)) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Expected<std::vector<int32_t>> rank_draft_ids(std::span<const uint64_t> counts, const Vocab& vocab,
                                              int64_t size, std::span<const int32_t> always) {
  const int64_t n_vocab = static_cast<int64_t>(counts.size());
  if (!vocab.tokens.empty() && static_cast<int64_t>(vocab.tokens.size()) != n_vocab) {
    return invalid_argument("counts cover ", n_vocab, " ids but the vocabulary has ", vocab.tokens.size(),
                            " tokens");
  }
  if (n_vocab < 1) return invalid_argument("empty vocabulary");
  if (size < 1) return invalid_argument("subset size must be at least 1 (got ", size, ")");
  if (size > n_vocab)
    return invalid_argument("subset size ", size, " exceeds the vocabulary (", n_vocab, " tokens)");
  std::vector<uint8_t> taken(static_cast<size_t>(n_vocab), 0);
  std::vector<int32_t> out;
  for (int32_t id : always) {
    if (id < 0 || id >= n_vocab)
      return invalid_argument("always-included id ", id, " is out of range (", n_vocab, " tokens)");
    if (taken[static_cast<size_t>(id)]) continue;
    taken[static_cast<size_t>(id)] = 1;
    out.push_back(id);
  }
  if (static_cast<int64_t>(out.size()) > size) {
    return invalid_argument("subset size ", size, " is smaller than the ", out.size(),
                            " control tokens that are always included");
  }
  std::vector<int32_t> seen;
  for (int64_t id = 0; id < n_vocab; ++id)
    if (counts[static_cast<size_t>(id)] > 0 && !taken[static_cast<size_t>(id)])
      seen.push_back(static_cast<int32_t>(id));
  std::stable_sort(seen.begin(), seen.end(), [&](int32_t a, int32_t b) {
    return counts[static_cast<size_t>(a)] > counts[static_cast<size_t>(b)];
  });
  const auto room = [&] { return static_cast<int64_t>(out.size()) < size; };
  for (size_t i = 0; i < seen.size() && room(); ++i) {
    out.push_back(seen[i]);
    taken[static_cast<size_t>(seen[i])] = 1;
  }
  // Unseen ids by increasing id; unused (padding) tokens only after every other one.
  for (int pass = 0; pass < 2 && room(); ++pass) {
    for (int64_t id = 0; id < n_vocab && room(); ++id) {
      const size_t u = static_cast<size_t>(id);
      if (taken[u] || is_type(vocab, u, TokenType::kUnused) != (pass == 1)) continue;
      taken[u] = 1;
      out.push_back(static_cast<int32_t>(id));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// The gathered head.

struct DraftVocab::Impl {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<int32_t> ids;
  std::unique_ptr<uint8_t, Free> rows;  // the gathered rows (null when full: the head is used in place)
  kernels::MatrixView w;
  int64_t n_embd = 0;
  bool full = false;
  kernels::PreparedActivations acts;
};

DraftVocab::DraftVocab() : impl_(std::make_unique<Impl>()) {}
DraftVocab::DraftVocab(DraftVocab&&) noexcept = default;
DraftVocab& DraftVocab::operator=(DraftVocab&&) noexcept = default;
DraftVocab::~DraftVocab() = default;

Expected<DraftVocab> DraftVocab::create(const Model& model, std::span<const int32_t> ranked, int64_t size,
                                        std::span<const int32_t> always) {
  if (size <= 0) return invalid_argument("draft vocabulary size must be at least 1 (got ", size, ")");
  if (!model.has_mtp())
    return invalid_argument("the model has no MTP block, so there is no draft head to subset");
  const TensorView& head = model.weights().mtp->head;
  if (!head.valid()) return invalid_argument("the model's MTP head has no data");
  if (!kernels::is_matmul_supported(head.type))
    return unsupported("the MTP head is ", type_name(head.type), ", which the matmul kernels do not handle");
  const int64_t n_embd = head.ne[0], n_vocab = head.ne[1];

  const size_t take = static_cast<size_t>(std::min<int64_t>(size, static_cast<int64_t>(ranked.size())));
  if (Status s = check_ids(ranked.first(take), n_vocab, "draft id"); !s.ok())
    return invalid_argument(s.message());
  std::vector<int32_t> ids(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(take));
  for (size_t i = 0; i < always.size(); ++i) {
    if (always[i] < 0 || always[i] >= n_vocab) {
      return invalid_argument("always-included id ", always[i], " at index ", i,
                              " is out of range for a vocabulary of ", n_vocab, " tokens");
    }
    ids.push_back(always[i]);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty())
    return invalid_argument("the draft vocabulary is empty (no ranked ids, no control tokens)");

  DraftVocab v;
  Impl& im = *v.impl_;
  im.n_embd = n_embd;
  im.full = static_cast<int64_t>(ids.size()) == n_vocab;
  const int64_t n = static_cast<int64_t>(ids.size()), rb = head.row_bytes();
  if (im.full) {
    im.w = kernels::MatrixView::contiguous(head.type, head.packed ? head.packed : head.data, n_embd, n_vocab);
    im.w.packed = head.packed != nullptr;
  } else {
    // Gathered rows, packed like the model's weights when the kernels have a packed layout for the type
    // (kernels/pack.h): the row count is then padded to whole tiles with copies of the last row.
    const bool pack = head.packed != nullptr;
    const int64_t n_alloc = pack ? (n + kernels::kPackRows - 1) / kernels::kPackRows * kernels::kPackRows : n;
    const size_t alloc = static_cast<size_t>((n_alloc * rb + 63) / 64 * 64);
    auto buffer = [&] { return static_cast<uint8_t*>(std::aligned_alloc(64, alloc)); };
    im.rows.reset(buffer());
    if (!im.rows) return Status(StatusCode::kResourceExhausted, str_cat("cannot allocate ", alloc, " bytes"));
    for (int64_t i = 0; i < n_alloc; ++i)
      std::memcpy(im.rows.get() + i * rb, head.row(ids[static_cast<size_t>(std::min(i, n - 1))]), rb);
    im.w = kernels::MatrixView::contiguous(head.type, im.rows.get(), n_embd, n_alloc);
    if (pack) {
      std::unique_ptr<uint8_t, Impl::Free> packed(buffer());
      if (!packed)
        return Status(StatusCode::kResourceExhausted, str_cat("cannot allocate ", alloc, " bytes"));
      im.w = kernels::pack_matrix(im.w, packed.get());
      im.rows = std::move(packed);
    }
    im.w.n_out = n;
  }
  im.ids = std::move(ids);
  return v;
}

Expected<DraftVocab> DraftVocab::first_n(const Model& model, int64_t size, std::span<const int32_t> always) {
  if (size <= 0) return invalid_argument("draft vocabulary size must be at least 1 (got ", size, ")");
  if (!model.has_mtp())
    return invalid_argument("the model has no MTP block, so there is no draft head to subset");
  const int64_t n_vocab = model.weights().mtp->head.ne[1];
  std::vector<int32_t> ranked(static_cast<size_t>(std::min(size, n_vocab)));
  std::iota(ranked.begin(), ranked.end(), 0);
  return create(model, ranked, size, always);
}

int64_t DraftVocab::size() const {
  return static_cast<int64_t>(impl_->ids.size());
}
std::span<const int32_t> DraftVocab::ids() const {
  return impl_->ids;
}
bool DraftVocab::full() const {
  return impl_->full;
}

bool DraftVocab::contains(int32_t id) const {
  return std::binary_search(impl_->ids.begin(), impl_->ids.end(), id);
}

void DraftVocab::logits(const float* h, int64_t n_rows, float* out, ThreadPool& pool) {
  MTP_CHECK(n_rows >= 0, "n_rows ", n_rows);
  if (n_rows == 0) return;
  Impl& im = *impl_;
  im.acts.prepare(kernels::act_format(im.w.type), h, n_rows, im.n_embd, im.n_embd, &pool);
  kernels::matmul(im.w, im.acts, out, size(), &pool);
}

int32_t DraftVocab::argmax(std::span<const float> row) const {
  MTP_CHECK(static_cast<int64_t>(row.size()) == size(), "row of ", row.size(), " logits for a subset of ",
            size());
  size_t best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = i;
  return impl_->ids[best];
}

uint64_t DraftVocab::bytes() const {
  return static_cast<uint64_t>(impl_->w.row_bytes) * static_cast<uint64_t>(impl_->w.n_out);
}

}  // namespace mtp::speculative
