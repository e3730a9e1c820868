#!/usr/bin/env python3
"""Writes the generated seed files of fuzz/corpus (run from the repository root): a small model (the bundled
tests/data/example.gguf cut down to one trunk layer and its MTP block), a tokenizer-only GGUF, a draft-vocab subset
file and importance matrices in both formats. The chat templates (copies of tests/chat/data/templates) and the
request bodies are plain files."""
import math
import struct
from pathlib import Path

# GGUF value types (docs/formats.md section 2.2).
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32 = 0


def gguf_string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    if kind == U32:
        return struct.pack("<I", v)
    if kind == I32:
        return struct.pack("<i", v)
    if kind == F32:
        return struct.pack("<f", v)
    if kind == BOOL:
        return struct.pack("<B", v)
    if kind == STRING:
        return gguf_string(v)
    elem, items = v
    return struct.pack("<IQ", elem, len(items)) + b"".join(gguf_value(elem, x) for x in items)


def gguf(kvs, tensors=()):
    """kvs: [(key, type, value)]; tensors: [(name, dims, f32 values)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, v in kvs:
        out += gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, v)
    data, offsets = b"", []
    for _, _, values in tensors:
        offsets.append(len(data))
        data += struct.pack(f"<{len(values)}f", *values)
        data += b"\0" * (-len(data) % 32)
    for (name, dims, _), off in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", GGML_F32, off)
    out += b"\0" * (-len(out) % 32)
    return out + data


def byte_level_alphabet():
    """GPT-2's printable stand-in for each byte, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = 0
    chars = []
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def read_gguf(b):
    """(kvs as raw bytes by key, [(name, dims, type, data bytes)]) of a GGUF v3 file with default alignment."""
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)

    def skip_string():
        nonlocal pos
        pos += 8 + struct.unpack_from("<Q", b, pos)[0]

    def skip_value(kind):
        nonlocal pos
        if kind == STRING:
            skip_string()
        elif kind == ARRAY:
            elem, count = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(count):
                skip_value(elem)
        else:
            pos += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[kind]

    kvs = {}
    for _ in range(n_kv):
        start = pos
        n = struct.unpack_from("<Q", b, pos)[0]
        key = b[pos + 8:pos + 8 + n].decode()
        skip_string()
        pos += 4
        skip_value(struct.unpack_from("<I", b, pos - 4)[0])
        kvs[key] = b[start:pos]
    infos = []
    for _ in range(n_tensors):
        n = struct.unpack_from("<Q", b, pos)[0]
        name = b[pos + 8:pos + 8 + n].decode()
        skip_string()
        n_dims = struct.unpack_from("<I", b, pos)[0]
        dims = struct.unpack_from(f"<{n_dims}Q", b, pos + 4)
        pos += 4 + 8 * n_dims
        ggml_type, offset = struct.unpack_from("<IQ", b, pos)
        pos += 12
        infos.append((name, dims, ggml_type, offset))
    data_start = pos + (-pos % 32)
    tensors = []
    for name, dims, ggml_type, offset in infos:
        elements = 1
        for d in dims:
            elements *= d
        size = elements * 4 if ggml_type == GGML_F32 else elements // 32 * 34  # f32 or q8_0
        tensors.append((name, dims, ggml_type, b[data_start + offset:data_start + offset + size]))
    return kvs, tensors


def model_seed():
    """tests/data/example.gguf (tiny shape, 4 trunk layers + MTP, q8_0) with only trunk layer 0 (delta-net) and the
    MTP block renumbered blk.1: the smallest file Model::load accepts with every kind of tensor binding."""
    kvs, tensors = read_gguf(Path("tests/data/example.gguf").read_bytes())
    kvs["qwen35moe.block_count"] = gguf_string("qwen35moe.block_count") + struct.pack("<II", U32, 2)
    keep = []
    for name, dims, ggml_type, data in tensors:
        if name.startswith("blk.4."):
            name = "blk.1." + name[len("blk.4."):]
        elif name.startswith("blk.") and not name.startswith("blk.0."):
            continue
        keep.append((name, dims, ggml_type, data))
    out = b"GGUF" + struct.pack("<IQQ", 3, len(keep), len(kvs)) + b"".join(kvs.values())
    offset = 0
    for name, dims, ggml_type, data in keep:
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += len(data) + (-len(data) % 32)
    out += b"\0" * (-len(out) % 32)
    for _, _, _, data in keep:
        out += data + b"\0" * (-len(data) % 32)
    return out


def tokenizer_seed():
    alphabet = byte_level_alphabet()
    tokens = list(alphabet)
    merges = []
    for left, right in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("ll", "o"), ("Ġ", "w")]:
        merges.append(f"{left} {right}")
        tokens.append(left + right)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    types = [1] * len(tokens) + [3, 3, 3, 4, 4]
    tokens += specials
    return gguf([
        ("general.architecture", STRING, "qwen35moe"),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "qwen35"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
        ("tokenizer.ggml.eos_token_id", U32, tokens.index("<|im_end|>")),
        ("tokenizer.ggml.padding_token_id", U32, tokens.index("<|endoftext|>")),
        ("tokenizer.ggml.add_bos_token", BOOL, 0),
        ("fuzz.text", STRING, "<|im_start|>user\nthe hello  world\te\u0301 42<think>\u00e9\U0001F600</think>"),
    ])


def draft_vocab(n_vocab, ids):
    return b"MTPDVOCB" + struct.pack(f"<III{len(ids)}I", 1, n_vocab, len(ids), *ids)


def legacy_imatrix(entries):
    out = struct.pack("<i", len(entries))
    for name, ncall, values in entries:
        b = name.encode()
        out += struct.pack("<i", len(b)) + b + struct.pack(f"<ii{len(values)}f", ncall, len(values), *values)
    return out


def kld_base(n_ctx, n_vocab, n_chunk):
    """llama-perplexity's KL-divergence base file: header, tokens, then per chunk n_ctx - 1 - n_ctx // 2 rows
    of a float scale, a float offset and n_vocab uint16 codes padded to even."""
    tokens = [(7 * i) % n_vocab for i in range(n_ctx * n_chunk)]
    out = b"_logits_" + struct.pack(f"<iii{len(tokens)}i", n_ctx, n_vocab, n_chunk, *tokens)
    words = 2 * ((n_vocab + 1) // 2)
    for r in range(n_chunk * (n_ctx - 1 - n_ctx // 2)):
        codes = [(r * 977 + 4099 * i) % 65536 for i in range(n_vocab)] + [0] * (words - n_vocab)
        out += struct.pack(f"<ff{words}H", 16.0 / 65535, -17.5, *codes)
    return out


def kld_top_k(n_ctx, n_vocab, n_chunk, k):
    """mtp's compact base: magic, version 1, four int32, tokens, then per scored row log p(next), the log of
    the mass outside the top k, and k (token, log p) pairs, most likely first; masses sum to 1."""
    tokens = [(7 * i) % n_vocab for i in range(n_ctx * n_chunk)]
    out = b"_mtpkld_" + struct.pack(f"<Iiiii{len(tokens)}i", 1, n_ctx, n_vocab, n_chunk, k, *tokens)
    for r in range(n_chunk * (n_ctx - 1 - n_ctx // 2)):
        probs = [0.5 ** (i + 1) for i in range(k)]
        row = struct.pack("<ff", math.log(probs[r % k]), math.log(1 - sum(probs)))
        for i in range(k):
            row += struct.pack("<if", (r + i) % n_vocab, math.log(probs[i]))
        out += row
    return out


def main():
    root = Path("fuzz/corpus")
    (root / "model_load").mkdir(parents=True, exist_ok=True)
    (root / "model_load" / "tiny_1layer_mtp_q8_0.gguf").write_bytes(model_seed())
    (root / "tokenizer").mkdir(parents=True, exist_ok=True)
    (root / "tokenizer" / "bpe_qwen35.gguf").write_bytes(tokenizer_seed())
    (root / "draft_vocab").mkdir(exist_ok=True)
    (root / "draft_vocab" / "subset_8_of_512.bin").write_bytes(draft_vocab(512, [3, 1, 4, 15, 9, 2, 6, 511]))
    (root / "imatrix").mkdir(exist_ok=True)
    (root / "imatrix" / "legacy.dat").write_bytes(legacy_imatrix([
        ("blk.0.ffn_down.weight", 10, [1.0, 2.0, 3.0, 4.0]),
        ("blk.0.attn_q.weight", 0, [0.5, 0.25]),
    ]))
    (root / "imatrix" / "imatrix.gguf").write_bytes(gguf(
        [("general.type", STRING, "imatrix"), ("imatrix.datasets", ARRAY, (STRING, ["calib.txt"]))],
        [("blk.0.ffn_down_exps.weight.in_sum2", [4, 2], [1, 2, 3, 4, 5, 6, 7, 8]),
         ("blk.0.ffn_down_exps.weight.counts", [1, 2], [2, 0])]))
    (root / "kld_base").mkdir(exist_ok=True)
    (root / "kld_base" / "ctx8_vocab5_2chunks.kld").write_bytes(kld_base(8, 5, 2))
    (root / "kld_base" / "top3_ctx8_vocab5_2chunks.kld").write_bytes(kld_top_k(8, 5, 2, 3))


if __name__ == "__main__":
    main()
