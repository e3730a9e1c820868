#!/usr/bin/env python3
"""Independent reference for mtp.cpp's tokenizer library (src/tokenizer), used to generate the expected-ids
table in tests/tokenizer/reference_data.inc.

Hugging Face `tokenizers` is not installable where this project is built, so this re-implements, from their
documented behaviour and not from the C++ code, the pieces of HF's pipeline that a Qwen-style byte-level BPE
tokenizer.json uses:
  - AddedVocabulary: added tokens are cut out of the text first, leftmost-longest (Aho-Corasick LeftmostLongest);
    control ("special") tokens only when parsing specials, user-defined ones always.
  - normalizer NFC (Qwen's tokenizer.json; Python's unicodedata) on each segment between added tokens, for the
    qwen2/qwen35 pre-tokenizers; a segment that is not valid UTF-8 is left as it is.
  - pre_tokenizer Split(pattern, behavior=Isolated): regex matches and the gaps between them are pieces. The
    pattern strings below are the tokenizer.json originals, run with the `regex` module (Debian python3-regex),
    whose \\s is Unicode White_Space and (?i) folds case like Oniguruma does.
  - ByteLevel(use_regex=false): GPT-2's byte -> unicode alphabet.
  - BPE: HF's Word::merge_all, a heap of (rank, position) candidates, a stale candidate skipped unless the pair at
    its position still merges into the same token.
Input is bytes. HF only takes valid UTF-8; for other input mtp.cpp's rule is that each maximal run of bytes not
part of a well-formed character is a piece of its own, and this script implements the same rule.

It also contains an independent implementation of mtp.cpp's small BPE trainer (most frequent pair, ties to the
lexicographically smallest (left bytes, right bytes)); the test checks that both trainers agree.

Usage: python3 scripts/reference/tokenizer/bpe_reference.py --emit tests/tokenizer/reference_data.inc
       python3 scripts/reference/tokenizer/bpe_reference.py --text 'Hello world'   # ids for the bundled vocab
"""

import argparse
import heapq
import os
import sys
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CORPUS = os.path.join(ROOT, "src", "tokenizer", "data", "train_corpus.txt")
N_MERGES = 300  # the bundled vocab used by the tests (kBundledMerges in tokenizer_test.cpp)

# tokenizer.json Split patterns (Qwen2, Qwen3.5) and the GPT-2 ByteLevel pattern.
PATTERNS = {
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen35": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<think>", "</think>"]


def gpt2_byte_alphabet():
    """openai/gpt-2 encoder.py bytes_to_unicode."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = gpt2_byte_alphabet()


def to_byte_level(bs):
    return "".join(B2U[b] for b in bs)


def valid_runs(data):
    """Yields (is_valid, bytes) runs: maximal well-formed UTF-8 stretches and the bytes between them."""
    i, n = 0, len(data)
    runs = []
    while i < n:
        length = 0
        for k in (1, 2, 3, 4):
            if i + k > n:
                break
            try:
                if len(data[i:i + k].decode("utf-8")) == 1:
                    length = k
                    break
            except UnicodeDecodeError:
                pass
        valid = length > 0
        step = length if valid else 1
        if runs and runs[-1][0] == valid:
            runs[-1][1].extend(data[i:i + step])
        else:
            runs.append((valid, bytearray(data[i:i + step])))
        i += step
    return [(v, bytes(b)) for v, b in runs]


def pre_tokenize(data, pre):
    pat = regex.compile(PATTERNS[pre])
    pieces = []
    for valid, run in valid_runs(data):
        if not valid:
            pieces.append(run)
            continue
        text = run.decode("utf-8")
        pos = 0
        for m in pat.finditer(text):
            if m.start() > pos:
                pieces.append(text[pos:m.start()].encode("utf-8"))
            pieces.append(m.group(0).encode("utf-8"))
            pos = m.end()
        if pos < len(text):
            pieces.append(text[pos:].encode("utf-8"))
    return pieces


def train(corpus, n_merges, pre="qwen35", min_frequency=2):
    """Returns (tokens as bytes, merges as (left bytes, right bytes)); ids are list positions."""
    counts = {}
    for w in pre_tokenize(corpus, pre):
        counts[w] = counts.get(w, 0) + 1
    words = [[bytes([b]) for b in w] for w in sorted(counts)]
    freqs = [counts[w] for w in sorted(counts)]
    tokens = [bytes([b]) for b in range(256)]
    known = set(tokens)
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for syms, f in zip(words, freqs):
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + f
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        a, b = best
        merges.append(best)
        if a + b not in known:
            known.add(a + b)
            tokens.append(a + b)
        for k, syms in enumerate(words):
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[k] = out
    return tokens, merges


class Reference:
    def __init__(self, tokens, merges, control, user_defined, pre):
        self.pre = pre
        self.tokens = list(tokens)
        self.vocab = {to_byte_level(t): i for i, t in enumerate(tokens)}
        self.n_normal = len(tokens)
        self.control = {t: self.n_normal + i for i, t in enumerate(control)}
        self.user = {t: self.n_normal + len(control) + i for i, t in enumerate(user_defined)}
        self.ranks = {}
        for rank, (a, b) in enumerate(merges):
            la, lb = to_byte_level(a), to_byte_level(b)
            self.ranks[(self.vocab[la], self.vocab[lb])] = (rank, self.vocab[la + lb])

    def piece_bytes(self, i):
        """The bytes id i decodes to."""
        if i < self.n_normal:
            return self.tokens[i]
        added = {v: k for k, v in {**self.control, **self.user}.items()}
        return added[i].encode()

    def bpe(self, word):
        syms = [self.vocab[B2U[b]] for b in word]
        alive = [True] * len(syms)
        nxt = list(range(1, len(syms))) + [-1]
        prv = list(range(-1, len(syms) - 1))
        heap = []

        def push(i):
            j = nxt[i]
            if j >= 0 and (syms[i], syms[j]) in self.ranks:
                rank, new = self.ranks[(syms[i], syms[j])]
                heapq.heappush(heap, (rank, i, new))

        for i in range(len(syms) - 1):
            push(i)
        while heap:
            rank, i, new = heapq.heappop(heap)
            if not alive[i] or nxt[i] < 0:
                continue
            j = nxt[i]
            cur = self.ranks.get((syms[i], syms[j]))
            if cur is None or cur[1] != new:
                continue
            syms[i] = new
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[i] >= 0:
                prv[nxt[i]] = i
            if prv[i] >= 0:
                push(prv[i])
            push(i)
        return [s for s, a in zip(syms, alive) if a]

    def encode(self, data, parse_special=True):
        added = dict(self.user)
        if parse_special:
            added.update(self.control)
        by_len = sorted(added, key=lambda t: -len(t.encode()))
        ids, seg, i = [], 0, 0
        while i < len(data):
            hit = next((t for t in by_len if data.startswith(t.encode(), i)), None)
            if hit is None:
                i += 1
                continue
            ids += self.encode_plain(data[seg:i])
            ids.append(added[hit])
            i += len(hit.encode())
            seg = i
        return ids + self.encode_plain(data[seg:])

    def encode_plain(self, data):
        if self.pre in ("qwen2", "qwen35"):
            try:
                data = unicodedata.normalize("NFC", data.decode("utf-8")).encode("utf-8")
            except UnicodeDecodeError:
                pass
        return [t for piece in pre_tokenize(data, self.pre) for t in self.bpe(piece)]


def bundled():
    with open(CORPUS, "rb") as f:
        corpus = f.read()
    tokens, merges = train(corpus, N_MERGES)
    return Reference(tokens, merges, CONTROL, USER_DEFINED, "qwen35"), tokens, merges


ENCODE_CASES = [
    (b"", True),
    (b"Hello world", True),
    (b"Hello, world! How are you?", True),
    (b"The small model reads the prompt one token at a time.", True),
    (b"I'm sure you've seen it. They'd rather wait; she's right. YOU'LL CHECK. We'RE here.", True),
    ("it'\u017f fine, don'\u017f".encode(), True),  # U+017F folds to 's' under (?i)
    (b"2024-03-14 costs $19.99 and 1,234,567; 0x7fff_ffff", True),
    (b"a  b   c    d\t\te  \n\n  f   ", True),
    (b"line one\nline two\r\n\r\nline three\n", True),
    (b"    return a + b;  // adds two numbers\n}\n", True),
    (b"def merge(pairs, ranks):\n    best = min(pairs)\n\treturn best\n", True),
    ("Zoë naïve São Paulo Zürich α β γ привет 你好世界 🙂🚀".encode(), True),
    ("cafe\u0301 a\u0308b n\u0303o \u0301x".encode(), True),  # combining marks
    ("👩\u200d💻 👍🏽 ❤️".encode(), True),
    (b"<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|endoftext|>", True),
    (b"<|im_start|>user\nHi there<|im_end|>\n<think>x</think>", False),
    (b"<|im_sta <|im_end| <|im_end|><|im_end|>>", True),
    (b"abc\xff\xfe def \xe4\xbd end \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe4\xbd\xa0", True),
    (b"\x80", True),
    (b"a\x00b\x01\x7f", True),
    ("a\u0085b a \u0085 b\u00a0c\u3000d\u2028e".encode(), True),  # White_Space beyond ASCII
    ("x\u180e'll \u180e\t\u200by".encode(), True),  # U+180E and U+200B are not White_Space
    (b"aaaaaaaaaaaaaaaaaaaaaaaaa", True),
    (b"          x", True),
    (b"Supercalifragilistic xylophone quizzically", True),
    (b"https://example.com/path/to/page?query=tokens&limit=100#section-2", True),
    (b"   ", True),
    (b"\n", True),
    (b"'s", True),
]

SPLIT_CASES = [
    ("qwen2", b"Hello world, it's 2024!\n\n  x"),
    ("qwen35", b"Hello world, it's 2024!\n\n  x"),
    ("gpt2", b"Hello world, it's 2024!\n\n  x"),
    ("qwen2", "cafe\u0301 n\u0303o \u0301x".encode()),
    ("qwen35", "cafe\u0301 n\u0303o \u0301x".encode()),
    ("qwen35", b"x   \t\n  y\r\n\r\n z  "),
    ("qwen35", "a\u0085b \u0085 c".encode()),
    ("qwen35", "x\u180e'll  \u180e\t\u200by\u2029 z".encode()),
    ("qwen35", b"abc\xff\xfedef\xe4\xbd"),
    ("qwen2", b"WE'LL it'S don't x'ye ...!!\n"),
    ("qwen35", "12345 ٣٤ ½ Ⅻ".encode()),
    ("qwen35", "it'\u017f x'K 'LL".encode()),  # U+017F folds to s; U+212A (Kelvin) folds to k, not a contraction
]


def c_string(data):
    out = []
    for b in data:
        c = chr(b)
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F and c != "?":
            out.append(c)
        else:
            out.append("\\%03o" % b)
    return 'std::string_view("%s", %d)' % ("".join(out), len(data))


def emit(path):
    ref, tokens, merges = bundled()
    lines = [
        "// Generated by scripts/reference/tokenizer/bpe_reference.py --emit; do not edit. Expected values come from that",
        "// script's independent Python implementation of HF tokenizers' byte-level BPE and of the trainer.",
        "",
        "inline constexpr int kRefMergeCount = %d;" % len(merges),
        "inline constexpr int kRefTokenCount = %d;  // normal tokens, before control/user-defined" % len(tokens),
        "// Merges in byte-level form, as Vocab::merges stores them.",
        "inline const std::string_view kRefMerges[] = {",
    ]
    for a, b in merges:
        lines.append("    %s," % c_string((to_byte_level(a) + " " + to_byte_level(b)).encode()))
    lines += ["};", "", "inline const RefEncodeCase kRefEncodeCases[] = {"]
    for data, special in ENCODE_CASES:
        ids = ref.encode(data, special)
        decoded = b"".join(ref.piece_bytes(i) for i in ids)
        lines.append(
            "    {%s, %s, {%s}, %s},"
            % (c_string(data), "true" if special else "false", ", ".join(map(str, ids)), c_string(decoded))
        )
    lines += ["};", "", "inline const RefSplitCase kRefSplitCases[] = {"]
    for pre, data in SPLIT_CASES:
        pieces = pre_tokenize(data, pre)
        lines.append('    {"%s", %s, {%s}},' % (pre, c_string(data), ", ".join(c_string(p) for p in pieces)))
    lines += ["};", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emit", help="write the C++ table to this path")
    ap.add_argument("--text", help="print ids of TEXT for the bundled vocab")
    ap.add_argument("--no-special", action="store_true")
    args = ap.parse_args()
    if args.emit:
        emit(args.emit)
    if args.text is not None:
        ref, _, _ = bundled()
        print(ref.encode(args.text.encode("utf-8", "surrogateescape"), not args.no_special))
    if not args.emit and args.text is None:
        ap.print_help()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
